"""The verdict and the remedies that follow from the budget.

Every number in a sentence here comes from a field of the report (a measurement, a
count or a ceiling), so the JSON holds what the prose says.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from gobrrr.budget import UNLINKED_UNIT, Budget
from gobrrr.contention import WALL_FACTOR_SAID
from gobrrr.counting import CountResult
from gobrrr.experiments import BatchScaling, GraphReplay
from gobrrr.gains import HostTime, host_time
from gobrrr.hardware import Ceilings
from gobrrr.phases import DATA_LOADING, working_ops
from gobrrr.remedies.base import Context
from gobrrr.remedies.catalog import predicted_slower, predictions
from gobrrr.units import fmt_bytes_per_s, fmt_flops, fmt_num, fmt_pct, fmt_s

__all__ = ["Remedy", "Verdict", "HostTime", "host_time", "remedies_for", "slower_notes",
           "verdict_for", "share_ranges", "HOST_NOTE_FRACTION"]

# Host time outside PyTorch ops is named in the evidence from this share of T_wall up:
# below it, it is within the error of its own estimate (a tiny op's cost stands for every
# op's dispatch) plus the timer's spread (up to 5%).
HOST_NOTE_FRACTION = 0.10


@dataclass
class Remedy:
    name: str  # the remedy's title
    regime: str  # the regime it addresses
    predicted_speedup: float | None  # whole-workload, from the budget
    basis: str  # the first-principles arithmetic behind the prediction
    how: str  # what to do (applying it is `gobrrr optimize`)
    spec: str = ""  # the catalog remedy (gobrrr.remedies.catalog) that predicted it

    def to_dict(self) -> dict[str, Any]:
        return dict(vars(self))


@dataclass
class Verdict:
    regime: str
    share: float
    evidence: list[str]
    agreement: str
    # what most of an overhead-bound step's overhead is, where it is measured apart:
    # "data loading" (the wait for the next batch: input-bound); None otherwise
    cause: str | None = None
    # The share's range over this run's T_wall spread (share_ranges), the runner-up and
    # its range; `uncertain`: the two ranges overlap, so the verdict names both
    share_range: tuple[float, float] | None = None
    runner_up: str | None = None
    runner_up_range: tuple[float, float] | None = None
    uncertain: bool = False
    # contention.wall_factor where the ranges cover it (a CPU whose load differed between
    # the timed calls and the counted run by more than WALL_FACTOR_SAID); else None
    wall_factor: float | None = None
    # a CPU run whose torch threads outnumbered the free cores (contention.Contention.
    # contended) while it was timed or counted: never a confident verdict (below)
    contended: bool = False
    # overhead read from a profiled trace's span (analyze without --step-ms): the
    # profiler's own host time is in it, so the share is an upper bound (as_traced)
    as_traced: bool = False

    def to_dict(self) -> dict[str, Any]:
        d = dict(vars(self))
        for k in ("share_range", "runner_up_range"):
            if d[k] is not None:
                d[k] = list(d[k])
        return d


def share_ranges(b: Budget, samples_s: Sequence[float], wall_factor: float = 1.0
                 ) -> dict[str, tuple[float, float]]:
    """Each part's share of T_wall when T_wall runs over its samples' interquartile range
    (all of them under 4 samples), the device-side parts (memory, compute,
    communication) held at their seconds and overhead taking the rest: how far this
    run's own timing spread moves the verdict. `wall_factor` (contention.wall_factor:
    T_wall at the CPU the op times were measured with, over T_wall) widens the range to
    cover it too. Not the spread between runs, which on a loaded machine is larger
    (issue 25); {} without samples or a budget."""
    total = b.total_s
    if total <= 0 or not samples_s:
        return {}
    xs = sorted(samples_s)
    if len(xs) >= 4:
        lo_t, hi_t = float(np.percentile(xs, 25)), float(np.percentile(xs, 75))
    else:
        lo_t, hi_t = xs[0], xs[-1]
    # the samples' spread about their median, applied to the budget's own total
    med = float(np.median(xs))
    if med <= 0:
        return {}
    fixed = {k: v for k, v in b.parts_s.items() if k != "overhead"}
    out: dict[str, list[float]] = {k: [] for k in b.parts_s}
    lo_f, hi_f = min(1.0, wall_factor), max(1.0, wall_factor)
    for t in (total * lo_t / med * lo_f, total * hi_t / med * hi_f):
        t = max(t, sum(fixed.values()))  # overhead is never negative
        for k, v in fixed.items():
            out[k].append(v / t if t > 0 else 0.0)
        out["overhead"].append(max(0.0, t - sum(fixed.values())) / t if t > 0 else 0.0)
    return {k: (min(v), max(v)) for k, v in out.items()}


def verdict_for(b: Budget, counts: CountResult, ceil: Ceilings, device: str,
                batch: BatchScaling | None, graph: GraphReplay | None,
                findings: list[str] | None = None,
                samples_s: Sequence[float] = (), wall_factor: float = 1.0,
                contended: bool = False) -> Verdict:
    """The dominant regime, its evidence (every number from the report), whether the
    experiments agree with the budget; `findings` (recompiles, graph breaks) are added
    to the evidence as they are; `samples_s`: T_wall's samples, and `wall_factor` (the
    CPU's difference between the timed calls and the counted run), for the share's range
    (share_ranges) and whether the runner-up's overlaps it. `contended`: a CPU run that
    waited for cores; its verdict names the runner-up too, whatever the ranges (on a
    busy 2-core machine the same GPT-2 doctor run's op times moved 5x between runs and
    its verdict between compute at 53-67% and overhead at 59-84%: issue 25)."""
    fr = b.fractions
    regime = b.regime
    ev: list[str] = []
    n_ops = working_ops(counts.records)
    # Under torchrun, exposed communication is neither idle nor Python: said apart.
    comm_s = b.communication_s or 0.0
    comm = (f"; exposed communication {fmt_s(comm_s)} "
            f"({fmt_pct(comm_s / b.total_s if b.total_s else 0)})" if comm_s > 0 else "")
    if device == "cuda":
        idle = max(0.0, 1 - (b.busy_s + comm_s) / b.total_s) if b.total_s else 0.0
        ev.append(f"GPU idle {fmt_pct(idle)} of wall time ({fmt_s(b.wall_s)} per call, "
                  f"{fmt_s(b.busy_s)} of kernels from {n_ops} ops{comm})")
    else:
        rest = ("the host's: waiting for data, Python and dispatch"
                if b.data_loading_s else "Python and dispatch")
        ev.append(f"ops execute {fmt_pct(b.busy_s / b.total_s if b.total_s else 0)} of "
                  f"wall time ({fmt_s(b.wall_s)} per call){comm}; the rest is {rest} "
                  f"({n_ops} ops; one tiny op costs {fmt_s(ceil.op_overhead_s)} here)")
    host = host_time(b, counts.records, ceil)
    cause: str | None = None
    if b.data_loading_s is not None and b.total_s > 0 and host.loading_s > 0:
        waiting = "the GPU idle" if device == "cuda" else "nothing else running"
        ev.append(f"{fmt_s(host.loading_s)} per step ({fmt_pct(host.loading_s / b.total_s)}"
                  f" of T_wall) is the wait for the next batch, with {waiting}: inside "
                  "DataLoader iterators' __next__")
        if regime == "overhead" and host.loading_s >= max(host.dispatch_s, host.outside_s):
            cause = DATA_LOADING
    if b.total_s > 0 and host.outside_s >= HOST_NOTE_FRACTION * b.total_s:
        what = "Python, sleep" if b.data_loading_s is not None else \
            "Python, sleep, data loading"
        # a replay skips the host's work whatever it is: said when one was measured
        replayed = (f": a CUDA-graph replay skips it (the replay measured "
                    f"{graph.speedup:.2f}x); no other remedy here removes it"
                    if device == "cuda" and graph is not None and graph.speedup else
                    ": no GPU or compiler remedy removes it")
        ev.append(f"{fmt_s(host.outside_s)} per call is host time outside PyTorch ops "
                  f"({what}){replayed}")
    if regime == "memory" and b.memory_s > 0:
        mem_bytes = sum(r.bytes for r in b.per_op if r.memory_s > 0)
        ev.append(f"memory-bound ops moved {fmt_num(mem_bytes, 'B')} at "
                  f"{fmt_bytes_per_s(mem_bytes / b.memory_s)} = "
                  f"{fmt_pct(mem_bytes / b.memory_s / ceil.bandwidth_bytes_per_s)} of the "
                  f"{ceil.roof_kind} bandwidth roof")
    instr_s = b.compute_s_by_unit.get("instruction", 0.0)
    unlinked_s = b.compute_s_by_unit.get(UNLINKED_UNIT, 0.0)
    flop_s = b.compute_s - instr_s - unlinked_s  # compute time the FLOP roof explains
    if regime == "compute" and unlinked_s > 0:
        ev.append(f"{fmt_s(unlinked_s)} of compute is GEMM, convolution or attention "
                  "kernels linked to no op (a CUDA graph's replay, or launches the "
                  "trace ties to no counted op): by their names, with no FLOP count and "
                  "no roofline")
    units = {k: v for k, v in b.compute_s_by_unit.items()
             if k not in ("instruction", UNLINKED_UNIT)}
    if regime == "compute" and flop_s > 0 and units:
        flops = sum(r.flops for r in b.per_op if r.compute_s > r.instruction_s)
        unit = max(units, key=lambda k: units[k])
        peak = ceil.peak_flops_per_s.get(unit, ceil.vector_flops_per_s())
        ev.append(f"compute-bound ops ran at {fmt_flops(flops / flop_s)} = "
                  f"{fmt_pct(flops / flop_s / peak)} of the {ceil.roof_kind} {unit} "
                  "peak")
    if instr_s > 0 and b.total_s > 0:
        # budget.classify: the calibrated element-wise rates explain these ops' time
        top = max(b.per_op, key=lambda r: r.instruction_s)
        ev.append(f"{fmt_s(instr_s)} ({fmt_pct(instr_s / b.total_s)} of T_wall) is "
                  "element-wise math bound by instruction throughput, not bytes: "
                  f"{top.name}: {top.reason}")
    if batch is not None and batch.time_ratio is not None:
        ev.append(batch.reading)
    if graph is not None and graph.possible and graph.speedup:
        ev.append(f"CUDA-graph replay {graph.speedup:.2f}x faster than eager "
                  f"(budget predicted {graph.predicted_speedup:.2f}x)"
                  if graph.predicted_speedup else
                  f"CUDA-graph replay {graph.speedup:.2f}x faster than eager")
    elif graph is not None and not graph.possible and device == "cuda":
        ev.append(f"no CUDA-graph replay: {graph.reason}")
    ev += findings or []
    # an implausible batch reading (less time for more work: noise) checks nothing and
    # is said so, never counted as a disagreement (issue 25)
    noise = batch is not None and batch.implausible
    disagree = []
    if batch is not None and batch.agrees is False and not noise:
        disagree.append(
            f"batch scaling measured {batch.time_ratio:.2f}x where the budget "
            f"predicted {batch.predicted_time_ratio:.2f}x" if batch.step_ratio is None
            else f"batch scaling from 2x to 4x measured {batch.step_ratio:.2f}x where "
            f"the budget predicted {batch.predicted_step_ratio:.2f}x")
    if graph is not None and graph.agrees is False:
        disagree.append(f"graph replay gained {graph.speedup:.2f}x where the budget "
                        f"predicted {graph.predicted_speedup:.2f}x")
    ran = [x for x in (None if noise else batch and batch.agrees, graph and graph.agrees)
           if x is not None]
    if disagree:
        agreement = "experiments DISAGREE with the budget: " + "; ".join(disagree)
    elif ran:
        agreement = "experiments agree with the budget"
    else:
        agreement = "no experiment could check the budget"
    if noise:
        assert batch is not None and batch.time_ratio is not None  # implausible: measured
        agreement += (f" (the 2x batch's {batch.time_ratio:.2f}x the time is within noise, "
                      "not a reading)")
    ranges = share_ranges(b, samples_s, wall_factor)
    if not ranges:
        return Verdict(regime, fr[regime], ev, agreement, cause)
    second = max((r for r in b.regimes if r != regime), key=lambda r: fr[r])
    uncertain = contended or ranges[regime][0] <= ranges[second][1]
    return Verdict(regime, fr[regime], ev, agreement, cause, ranges[regime], second,
                   ranges[second], uncertain,
                   wall_factor if abs(math.log(wall_factor)) > math.log(WALL_FACTOR_SAID)
                   else None, contended)


def remedies_for(b: Budget, counts: CountResult, ceil: Ceilings, device: str,
                 batch: BatchScaling | None, graph: GraphReplay | None, *,
                 module_types: set[str] | None = None, optimizers: list[Any] | None = None,
                 param_storages: frozenset[int] = frozenset(),
                 comm: Any | None = None, loaders: list[Any] | None = None,
                 data_loading: Any | None = None,
                 repeated_blocks: tuple[str, ...] = ()) -> list[Remedy]:
    """The catalog's remedies that apply to this workload and for which the budget
    predicts a gain, sorted by predicted gain. Each prediction is its remedy's own
    (`RemedySpec.predict`), the very number `gobrrr optimize` starts from.
    module_types, optimizers: what the workload reaches (read only), for the remedies
    that apply only to some (a cast needs a module, a fused optimizer an optimizer);
    comm: a torchrun job's communication facts (remedies/comm.py), for the DDP and FSDP2
    remedies; loaders, data_loading: the DataLoaders a script iterated and its measured
    wait for data (remedies/data.py); repeated_blocks: the modules' repeated blocks
    (remedies/nested.py), which a CUDA training step's compile snippet marks."""

    ctx = _context(b, counts, ceil, device, batch, graph, module_types=module_types,
                   optimizers=optimizers, param_storages=param_storages, comm=comm,
                   loaders=loaders, data_loading=data_loading,
                   repeated_blocks=repeated_blocks)
    return [Remedy(spec.title or spec.name, addressed_regime(spec.regime, gain.saved_s),
                   gain.speedup, gain.basis,
                   spec.snippet_in(ctx) if spec.snippet_for else spec.how or spec.snippet,
                   spec.name)
            for spec, gain in predictions(ctx)]


def _context(b: Budget, counts: CountResult, ceil: Ceilings, device: str,
             batch: BatchScaling | None, graph: GraphReplay | None, *,
             module_types: set[str] | None = None, optimizers: list[Any] | None = None,
             param_storages: frozenset[int] = frozenset(), comm: Any | None = None,
             loaders: list[Any] | None = None, data_loading: Any | None = None,
             repeated_blocks: tuple[str, ...] = ()) -> Context:
    return Context(device, b, ceil, counts.records, batch, graph,
                   module_types=module_types or set(), optimizers=optimizers or [],
                   param_storages=param_storages, comm=comm, loaders=loaders or [],
                   data_loading=data_loading, repeated_blocks=repeated_blocks)


def slower_notes(b: Budget, counts: CountResult, ceil: Ceilings, device: str,
                 batch: BatchScaling | None, graph: GraphReplay | None,
                 **facts: Any) -> list[str]:
    """One note per remedy that applies but is predicted to slow the workload
    (`catalog.predicted_slower`), so a remedy the user may expect (torch.compile on an
    overhead-bound CPU call) is not missing without a word. `facts`: remedies_for's."""
    ctx = _context(b, counts, ceil, device, batch, graph, **facts)
    return [f"{spec.title or spec.name} is not listed: predicted slower here "
            f"({speedup:.2f}x): {gain.basis}"
            for spec, speedup, gain in predicted_slower(ctx)]


def addressed_regime(declared: str, saved_s: dict[str, float]) -> str:
    """The regime a remedy's prediction takes the most time from, else the one its catalog
    entry names. torch.compile is catalogued for memory (fusion), but on a CPU workload
    its prediction can rest mostly on the dispatch it removes: the demo's MLP, 85%
    overhead, was shown "compile, for: memory" beside a basis all about dispatch."""
    positive = {part: s for part, s in saved_s.items() if s > 0}
    return max(positive, key=lambda part: positive[part]) if positive else declared
