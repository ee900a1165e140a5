"""The measured run: the one value every source produces and the one end
(diagnosis.py) turns into the Report.

Sources: a live callable (live.py: timed, then counted and profiled), one profiler trace
(tracefile/analysis.py), the ranks of a torchrun job (dist/diagnose.py), the ranks'
traces (dist/analyze.py). Each says what it measured in the same terms:

- `steps`: the steps measured, in order, each with its wall time (a live callable: one
  step per timed call, its median; a trace: each profiled step's span) and, where a
  whole step is one phase (a prefill, a decode), that phase;
- `profile`: the counted ops of one (averaged) step with their device or execution
  time and the kernels they launched (ProfiledRun); each op carries its phase
  (phases.py), each kernel the op that launched it;
- `timing`: T_wall's statistics per step, and `wall_s`, the T_wall the budget splits;
- `communication_s`: the exposed communication per step (distributed sources only);
- `data_loading`: the time spent waiting for the next batch inside DataLoader iterators
  (a script run in place: timed unprofiled; a trace: its DataLoader ranges), and how
  much of it the device sat idle: None where the source saw no DataLoader.

Kernel and ProfiledRun, the data the live profiled run (profile.py), the compiled run
(compiled.py) and a trace's steps (tracefile/steps.py) fill, are defined here too.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from gobrrr.counting import CountResult
from gobrrr.timing import Timing

__all__ = ["Kernel", "ProfiledRun", "Step", "DataLoading", "MeasuredRun"]


@dataclass
class Kernel:
    name: str
    duration_s: float
    record_index: int | None  # the counted op that launched it (None: outside any)
    start_us: float | None = None  # device start, profiler clock (None: not linked)


@dataclass
class ProfiledRun:
    counts: CountResult
    device: str
    op_time_s: dict[int, float]  # record index -> device time (CUDA) or exec time (CPU)
    kernels: list[Kernel] = field(default_factory=list)
    busy_s: float = 0.0  # total kernel time (CUDA) or summed op exec time (CPU)
    empty_range_cost_s: float = 0.0  # CPU only: dispatch cost subtracted from each op
    unattributed_s: float = 0.0  # kernel time outside any counted op
    unreplayable: list[str] = field(default_factory=list)  # CPU ops that failed to replay
    replay_errors: dict[str, str] = field(default_factory=dict)  # op -> first error line
    _by_index: dict[int, list[Kernel]] | None = None

    def tally_kernels(self) -> None:
        """Each op's device time, the time of kernels outside any op, and the total,
        from `kernels` (CUDA): the one place these sums are made."""
        self.op_time_s, self.unattributed_s, self._by_index = {}, 0.0, None
        for k in self.kernels:
            if k.record_index is None:
                self.unattributed_s += k.duration_s
            else:
                self.op_time_s[k.record_index] = (self.op_time_s.get(k.record_index, 0.0)
                                                  + k.duration_s)
        self.busy_s = sum(k.duration_s for k in self.kernels)

    def kernels_of(self, index: int) -> list[Kernel]:
        if self._by_index is None:
            self._by_index = {}
            for k in self.kernels:
                if k.record_index is not None:
                    self._by_index.setdefault(k.record_index, []).append(k)
        return self._by_index.get(index, [])

    def without_records(self, drop: set[int]) -> ProfiledRun:
        """The run without the kernels the records `drop` launched (a distributed run's
        collectives: their time is communication), re-tallied. CUDA runs only."""
        self.kernels = [k for k in self.kernels if k.record_index not in drop]
        self.tally_kernels()
        return self


@dataclass(frozen=True)
class Step:
    """One measured step: its name, its wall time in seconds and, where the whole step
    is one phase (a prefill, a decode, a wait for data), that phase (phases.py); None
    where its ops carry their own phases (a training step: forward, backward,
    optimizer)."""

    name: str
    wall_s: float
    phase: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "wall_s": self.wall_s, "phase": self.phase}


@dataclass(frozen=True)
class DataLoading:
    """Per step, the wait for the next batch: `host_s`, the mean time inside DataLoader
    iterators' `__next__` (the main process loading, or waiting on its workers), of
    which `exposed_s` ran with the device idle (all of it on CPU: the host is the
    device). `per_step_s`: each measured step's host_s, in order; `first_batch_s`: the
    first batch of each iterator that started among them (worker start-up, an epoch's
    first shuffle), apart; `source` says how it was measured."""

    host_s: float
    exposed_s: float
    per_step_s: tuple[float, ...] = ()
    first_batch_s: tuple[float, ...] = ()
    source: str = ""

    @property
    def device_busy_share(self) -> float:
        """The share of the wait the device spent running work queued before it."""
        return 1.0 - self.exposed_s / self.host_s if self.host_s > 0 else 0.0

    def to_dict(self) -> dict[str, Any]:
        return {"host_s": self.host_s, "exposed_s": self.exposed_s,
                "device_busy_share": self.device_busy_share,
                "per_step_s": list(self.per_step_s),
                "first_batch_s": list(self.first_batch_s), "source": self.source}


@dataclass
class MeasuredRun:
    """What a source measured (module docstring)."""

    source: str  # "callable" | "trace" | "ranks" | "rank traces"
    workload: dict[str, Any]  # the report's `workload` entry
    device: str  # "cuda" | "cpu"
    timing: Timing  # T_wall per step: the unprofiled timer's, or the steps' spans
    wall_s: float  # the T_wall the budget splits (timer: median; trace: mean span)
    profile: ProfiledRun  # one (averaged) step's counted ops, times and kernels
    steps: list[Step] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    communication_s: float | None = None  # exposed, per step; None: one process
    data_loading: DataLoading | None = None  # None: no DataLoader seen
    contention: Any = None  # contention.Contention over the timed calls (None: not watched)
    # the same over the counted run, whose op times the budget reads (live source, CPU)
    contention_counted: Any = None
    # every step the source saw, in order, with the part of the run it fell in
    # ("warm-up", "timed", "profiled"): a script's warm-up, drift and spikes (a plot in
    # the HTML); empty where the source saw only its measured steps
    series: list[tuple[str, float]] = field(default_factory=list)
    # CUDA: the host's issue time of one call, measured with the GPU held busy
    # (host_issue.py); None where not measured
    host_issue_s: float | None = None
    # CUDA: the workload's largest fp32 GEMM shapes timed in fp32, TF32 and bf16
    # (gemm_probe.py); empty where not measured
    gemm_times: list[Any] = field(default_factory=list)

    @property
    def counts(self) -> CountResult:
        return self.profile.counts

    def steps_dict(self) -> dict[str, Any]:
        """The report's `steps` entry: how many, their names and walls (a long run lists
        its first and last few)."""
        shown = self.steps if len(self.steps) <= 20 else [*self.steps[:10],
                                                          *self.steps[-10:]]
        out = {"count": len(self.steps), "source": self.source,
               "shown": [s.to_dict() for s in shown]}
        if self.series:
            out["series"] = {"part": [p for p, _ in self.series],
                             "wall_s": [t for _, t in self.series]}
        return out
