"""The one end of every diagnosis: a measured run (run.py) and the ceilings it is judged
by -> the Report.

Every source ends here: a live callable (live.py), one trace (tracefile/analysis.py),
the ranks of a torchrun job (dist/diagnose.py), the ranks' traces (dist/analyze.py).
What a source measured beyond the run comes in beside it, each finished before the
Report is made (nothing is patched in afterwards):
- `experiments`: the batch and CUDA-graph experiments' times, read here against the
  budget (experiments.Measured);
- `compiled`: what compiling cost and what dynamo found (compiled.CompileInfo);
- `state`: what was saved and put back of the user's state (state.StateCheck);
- `facts`: what the workload reaches, for the remedies that apply only to some
  (remedies.base.Context's fields);
- `distributed`: rank 0's merge of every rank (dist/section.py), whose evidence lines
  lead the verdict's;
- `memory`: what one step keeps alive (memory.MemoryProfile's dict), the live source's.

budget -> (experiments read against it) -> verdict -> remedies -> Report.
"""

from __future__ import annotations

import math
import time
from dataclasses import replace
from typing import Any

from gobrrr.budget import Budget, compute_budget, with_communication, with_data_loading
from gobrrr.ceiling_defense import defended
from gobrrr.compiled import CompileInfo
from gobrrr.contention import WALL_FACTOR_SAID, cpu_difference, wall_factor
from gobrrr.experiments import Measured
from gobrrr.hardware import Ceilings
from gobrrr.report import Report
from gobrrr.run import MeasuredRun
from gobrrr.state import StateCheck
from gobrrr.verdict import remedies_for, slower_notes, verdict_for

__all__ = ["budget_for", "report_for"]


def budget_for(run: MeasuredRun, ceilings: Ceilings) -> Budget:
    """The run's budget: three parts, four with the exposed communication of a
    distributed source; the measured wait for data, where a DataLoader was seen, named
    inside its overhead."""
    b = compute_budget(run.profile, run.wall_s, ceilings)
    if run.communication_s is not None:
        b = with_communication(b, run.communication_s)
    if run.data_loading is not None:
        b = with_data_loading(b, run.data_loading.exposed_s)
    if run.host_issue_s is not None:  # a floor under remedies' predictions (gains.py)
        b = replace(b, host_issue_s=min(run.host_issue_s, b.total_s))
    if run.gemm_times:  # the precision remedies' ratios at these shapes (precision.py)
        b = replace(b, gemm_times=list(run.gemm_times))
    return b


def report_for(run: MeasuredRun, ceilings: Ceilings, *, experiments: Measured | None = None,
               compiled: CompileInfo | None = None, state: StateCheck | None = None,
               facts: dict[str, Any] | None = None, distributed: Any = None,
               started_s: float | None = None, memory: dict[str, Any] | None = None
               ) -> Report:
    """The Report of `run` (module docstring). `started_s`: the time.perf_counter() when
    its source began (the report's diagnose_s)."""
    # a roof an op beat is measured again, and the budget made with it (ceiling_defense)
    budget, ceilings, defense = defended(lambda c: budget_for(run, c), run.source,
                                         run.counts.records, ceilings,
                                         budget_for(run, ceilings))
    batch, graph = (experiments or Measured()).read(budget)
    findings = compiled.findings() if compiled is not None else []
    contended = run.contention.finding(run.device) if run.contention is not None else None
    findings += [contended] if contended else []
    factor = (wall_factor(run.contention, run.contention_counted)
              if run.device == "cpu" else None)
    if factor is not None and abs(math.log(factor)) > math.log(WALL_FACTOR_SAID):
        findings.append(cpu_difference(run.contention, run.contention_counted, factor))
    contended_cpu = run.device == "cpu" and any(
        c is not None and c.contended for c in (run.contention, run.contention_counted))
    verdict = verdict_for(budget, run.counts, ceilings, run.device, batch, graph, findings,
                          samples_s=run.timing.samples_s, wall_factor=factor or 1.0,
                          contended=contended_cpu)
    if distributed is not None:
        verdict = replace(verdict, evidence=[*distributed.evidence(), *verdict.evidence])
    remedies = remedies_for(budget, run.counts, ceilings, run.device, batch, graph,
                            data_loading=run.data_loading, **(facts or {}))
    slower = slower_notes(budget, run.counts, ceilings, run.device, batch, graph,
                          data_loading=run.data_loading, **(facts or {}))
    return Report(
        workload=run.workload, ceilings=ceilings, timing=run.timing, counts=run.counts,
        budget=budget, verdict=verdict, remedies=remedies, batch=batch, graph=graph,
        diagnose_s=0.0 if started_s is None else time.perf_counter() - started_s,
        notes=run.notes + budget.notes + defense + slower, state=state, compiled=compiled,
        distributed=distributed, steps=run.steps_dict(), data_loading=run.data_loading,
        contention=run.contention, contention_counted=run.contention_counted, memory=memory)
