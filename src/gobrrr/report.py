"""The Report: everything `gobrrr doctor` found, as data. `to_dict()` is the JSON
(`--json`, schema/report.schema.json) and the one input of every renderer (gobrrr.show:
the terminal, the HTML page, the trace), which this module does not import: the report
owns its numbers, renderers only render. The verdict and remedies are made in verdict.py.
"""

from __future__ import annotations

import datetime as _dt
import json
from dataclasses import dataclass, field
from typing import Any

from gobrrr import jsontext
from gobrrr.budget import Budget
from gobrrr.compiled import CompileInfo
from gobrrr.counting import CountResult
from gobrrr.experiments import BatchScaling, GraphReplay
from gobrrr.hardware import Ceilings
from gobrrr.state import StateCheck
from gobrrr.step_phases import step_phases
from gobrrr.timing import Timing
from gobrrr.verdict import Remedy, Verdict
from gobrrr.version import __version__

__all__ = ["Report", "SCHEMA_VERSION"]

# 1.1: budget.per_call, .kernels, .unmeasured_ops; state; compiled; workload.model
# 1.2: workload.source and workload.trace (gobrrr analyze); machine.source "datasheet"
# 1.3: remedies[].spec (the catalog remedy whose prediction it is)
# 1.4: distributed (torchrun: every rank's split, collectives, stragglers, no_sync);
#      fractions.communication, budget.communication_s and regime "communication" in it
# 1.5: ops below their roof: budget.low_roof_s/_threshold; per_call and row limit,
#      math_floor_s, reason, cause, roof_band; row instruction_s; machine's element-wise
#      math rates (ceilings schema 3); compute_s_by_unit "instruction"
# 1.6: distributed: waiting estimated from the no_sync paces (and the profiled figure),
#      DDP's bucket copies, the no_sync comparison, topology, ceilings, the projection.
# 1.7: steps (the measured run's steps); budget.per_phase, total_s, parts_s; each
#      budget.kernels row's phase
# 1.8: phases (each phase's seconds and share of the step: step_phases.py);
#      data_loading and budget.data_loading_s (a DataLoader's wait); verdict.cause;
#      steps.series (every step a script ran, warm-up included); generation (prefill and
#      decode of `doctor hf:NAME --generate N`)
# 1.9: workload.trace.step_rule and .check (analyze: steps found in unmarked traces, the
#      trace's health check); tables written one row per line (jsontext.py);
#      generation.batch_scaling (the decode batch experiment); verdict.share_range,
#      runner_up, runner_up_range, uncertain (the share over T_wall's spread);
#      contention (other processes' load against the cores and torch's threads)
# 1.10: compute_s_by_unit "unlinked" (math kernels linked to no op, by name: a replayed
#       CUDA graph in a recorded trace), counted as compute; memory (one step's peak and
#       its categories, `gobrrr memory`'s figures: the live source with experiments)
# 1.11: generation.decode_graph (the decode step's CUDA-graph experiment,
#       generation_graph.py)
# 1.12: generation.seconds_by_part (where doctor --generate's own time went);
#       timing.runs_s (doctor --repeat: each run's median); generation.decode.split
#       (the decode step's own compute / memory / overhead)
# 1.13: contention.counted (the same over the counted run, whose op times the budget
#       reads; on a CPU the verdict's share ranges cover the difference: verdict.
#       wall_factor); verdict.contended (a contended CPU run is never confident)
# 1.14: budget.host_issue_s (CUDA: the host's issue time of one call, the floor under
#       the predicted time of remedies that leave the host's work); budget.gemm_times
#       (CUDA: the largest fp32 GEMM shapes timed in fp32, TF32, bf16); memory.
#       largest_allocation_bytes and largest_allocation (the step's largest tensor)
# 1.15: budget.gemm_times[].bf16_padded_s, tf32_padded_s (an unaligned shape timed padded
#       to 16 bytes, as Inductor pads it; null where aligned)
# 1.16: experiments.batch_scaling.step_ratio, predicted_step_ratio (from a batch of 1,
#       the 2x -> 4x step checks the budget: experiments._past_batch_one)
# 1.17: verdict.as_traced (analyze: an overhead verdict read from a profiled trace's
#       span, an upper bound: tracefile/analysis.as_traced)
SCHEMA_VERSION = "1.17"


@dataclass
class Report:
    """Everything `gobrrr doctor` found; `.to_json()` is what `--json` prints."""

    workload: dict[str, Any]
    ceilings: Ceilings
    timing: Timing
    counts: CountResult
    budget: Budget
    verdict: Verdict
    remedies: list[Remedy]
    batch: BatchScaling | None = None
    graph: GraphReplay | None = None
    diagnose_s: float = 0.0
    notes: list[str] = field(default_factory=list)
    # what was saved and restored of the user's state, and what could not be (loud)
    state: StateCheck | None = None
    compiled: CompileInfo | None = None  # the workload runs under torch.compile
    # torchrun: rank 0's merge of every rank (dist/merge.Distributed); None: one process
    # (or a rank other than 0)
    distributed: Any | None = None
    # the steps the source measured (run.MeasuredRun.steps_dict): how many, which
    steps: dict[str, Any] | None = None
    # the wait for data (run.DataLoading); None: the source saw no DataLoader
    data_loading: Any | None = None
    contention: Any | None = None  # contention.Contention over the timed calls
    contention_counted: Any | None = None  # the same over the counted run (live, 1.13)
    # a generation's prefill and decode (generation.GenerationProfile.to_dict()); None:
    # no generation was measured
    generation: dict[str, Any] | None = None
    # one step's memory (memory.MemoryProfile.to_dict()): peak and categories at it;
    # None: not measured (no experiments, compiled, or a trace)
    memory: dict[str, Any] | None = None
    created: str = field(default_factory=lambda: _dt.datetime.now(_dt.timezone.utc)
                         .isoformat(timespec="seconds"))

    @property
    def regime(self) -> str:
        return self.verdict.regime

    @property
    def fractions(self) -> dict[str, float]:
        return self.budget.fractions

    @property
    def breakdown(self) -> dict[str, Any]:
        b = self.budget
        return {"seconds": {"overhead": b.overhead_s, "memory": b.memory_s,
                            "compute": b.compute_s},
                "fractions": b.fractions,
                "per_op": [r.to_dict() for r in b.per_op],
                "per_module": [r.to_dict() for r in b.per_module]}

    def to_dict(self) -> dict[str, Any]:
        return {
            "schema": "gobrrr.report",
            "schema_version": SCHEMA_VERSION,
            "gobrrr_version": __version__,
            "created": self.created,
            "workload": self.workload,
            "machine": self.ceilings.to_dict(),
            "regime": self.regime,
            "fractions": self.fractions,
            "verdict": self.verdict.to_dict(),
            "timing": self.timing.to_dict(),
            "counts": {"total_flops": self.counts.total_flops,
                       "total_bytes": self.counts.total_bytes,
                       "ops": len(self.counts.records),
                       "uncounted_ops": self.counts.uncounted_ops},
            "budget": self.budget.to_dict(),
            "phases": step_phases(self.budget),
            "experiments": {
                "batch_scaling": self.batch.to_dict() if self.batch else None,
                "graph_replay": self.graph.to_dict() if self.graph else None,
            },
            "remedies": [r.to_dict() for r in self.remedies],
            "diagnose_s": self.diagnose_s,
            "notes": self.notes,
            "state": self.state.to_dict() if self.state is not None else None,
            "compiled": self.compiled.to_dict() if self.compiled is not None else None,
        } | ({} if self.steps is None else {"steps": self.steps}) | (
            {} if self.distributed is None else {"distributed": self.distributed.to_dict()}) | (
            {} if self.data_loading is None else {"data_loading": self.data_loading.to_dict()}
        ) | (
            {} if self.contention is None else {"contention": self.contention.to_dict() | (
                {} if self.contention_counted is None
                else {"counted": self.contention_counted.to_dict()})}
        ) | ({} if self.generation is None else {"generation": self.generation}) | (
            {} if self.memory is None else {"memory": self.memory})

    def to_json(self, indent: int | None = 2) -> str:
        """`--json`'s text (jsontext: tables one row per line); `indent=None`: one line."""
        if indent is None:
            return json.dumps(self.to_dict(), default=str)
        return jsontext.dumps(self.to_dict())
