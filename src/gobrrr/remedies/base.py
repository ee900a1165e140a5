"""The data model of `gobrrr optimize`: what a remedy declares, the candidate it builds,
and the result the harness records. Plain dataclasses; the work is in the families
(one module each), verify.py (correctness and speed) and runner.py (the loop).

A remedy is applied to a *candidate*: an independent copy of the workload (copying.py)
plus the global switches to hold around each call and the preparation steps (compile,
graph capture) to run once before timing. Remedies compose by applying them in stage
order to one candidate: first those that mutate the copy (layout, optimizer flags), then
precision wrappers, then execution (compile or CUDA-graph capture of everything above).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from typing import Any

from gobrrr.state import Copied

__all__ = ["Context", "Candidate", "RemedySpec", "RemedyResult", "STATUSES",
           "STAGE_MUTATE", "STAGE_PRECISION", "STAGE_EXECUTION", "speedup_from_saved",
           "switches_on"]

# Ordering of application when remedies combine (see module docstring).
STAGE_MUTATE, STAGE_PRECISION, STAGE_EXECUTION = 0, 1, 2

# "unverifiable": the reference cannot judge the outputs (not finite, or eager differs
# from itself beyond verify.NOISE_CEILING); timed, never "verified", never the best.
STATUSES = ("verified", "no significant change", "slower", "unverifiable", "rejected",
            "failed", "not applicable", "advice")

Progress = Callable[[str], None]


@dataclass
class Context:
    """What every remedy may read: the device, the diagnose report (None when skipped),
    and facts about the workload found on the base copy."""

    device: str
    report: Any | None  # gobrrr.report.Report
    module_types: set[str] = field(default_factory=set)  # class names of reachable modules
    optimizers: list[Any] = field(default_factory=list)  # on the base copy: read, never run
    zero_grad_set_to_none: list[bool] = field(default_factory=list)  # as called by the step
    independent_copy: bool = True  # False: state shared with the user's objects
    records: list[Any] = field(default_factory=list)  # counting.OpRecord of one call
    compile_backend: str = "inductor"  # tests use "eager" where only dynamo is checked
    # "tf32" when eager itself already runs fp32 matmuls/convs in TF32 (cuDNN's default
    # allow_tf32=True for convolutions): any remedy is then judged at TF32's tolerance
    reference_precision: str | None = None

    @property
    def budget(self) -> Any | None:
        return None if self.report is None else self.report.budget

    def report_prediction(self, prefix: str) -> tuple[float | None, str] | None:
        """The diagnose report's predicted speedup for the remedy whose name starts with
        `prefix` (report.remedies_for), if it made one."""
        if self.report is None:
            return None
        for r in self.report.remedies:
            if r.name.startswith(prefix):
                return r.predicted_speedup, r.basis
        return None


@dataclass
class Candidate(Copied):
    """A copy of the workload (the fields of state.Copied) with remedies applied.
    `call()` is one call of it."""

    switches: list[Callable[[], contextlib.AbstractContextManager[Any]]] = \
        field(default_factory=list)
    prepare: list[Callable[[Candidate], None]] = field(default_factory=list)
    replay: Callable[[], Any] | None = None  # set by CUDA-graph capture
    precision: str | None = None  # "tf32" | "bf16": outputs compared as lower precision
    compile_mode: str | None = None  # set by a compile remedy: its check runs on timing
    compile_info: dict[str, Any] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    def call(self) -> Any:
        if self.replay is not None:
            return self.replay()
        return self.fn(*self.args, **self.kwargs)


@dataclass(frozen=True)
class RemedySpec:
    """One remedy of the catalog. `applies` returns why it does not apply (None: it
    does); `predict` the whole-workload speedup and its arithmetic; `apply` changes the
    candidate (a copy) and may raise: the harness records the reason."""

    name: str
    family: str
    regime: str
    stage: int
    group: str  # remedies of one group exclude each other in combinations
    applies: Callable[[Context], str | None]
    predict: Callable[[Context], tuple[float | None, str]]
    apply: Callable[[Candidate, Context], Candidate]
    snippet: str  # what the user pastes to apply it
    precision: str | None = None  # lowers precision: compared under its tolerance
    advice_only: bool = False  # never applied (batch size)


@dataclass
class RemedyResult:
    name: str
    regime: str
    status: str  # one of STATUSES
    reason: str
    predicted_speedup: float | None = None
    prediction_basis: str = ""
    measured_speedup: float | None = None
    interval: tuple[float, float] | None = None  # 95% bootstrap interval of the speedup
    compile_s: float | None = None  # preparation (compile, capture) apart from steady state
    verified: bool = False  # outputs within tolerance of the eager reference
    tolerance: str = ""
    max_error: float | None = None
    eager_s: float | None = None
    candidate_s: float | None = None
    components: tuple[str, ...] = ()  # the single remedies of a combination
    checks: dict[str, Any] = field(default_factory=dict)  # graph breaks, recompiles, ...
    snippet: str = ""

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["interval"] = list(self.interval) if self.interval else None
        d["components"] = list(self.components)
        return d


def speedup_from_saved(total_s: float, saved_s: float) -> float | None:
    """Whole-workload speedup when `saved_s` of `total_s` disappears (Amdahl)."""
    if total_s <= 0 or saved_s <= 0:
        return None
    return total_s / max(total_s - saved_s, 1e-12)


@contextlib.contextmanager
def switches_on(cand: Candidate) -> Iterator[None]:
    """Hold the candidate's global switches (TF32 flags, ...); each restores its own
    state on exit, also when the call raises."""
    with contextlib.ExitStack() as stack:
        for s in cand.switches:
            stack.enter_context(s())
        yield
