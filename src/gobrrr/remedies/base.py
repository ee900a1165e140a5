"""The data model of `gobrrr optimize`: what a remedy declares, the candidate it builds,
and the result the harness records. Plain dataclasses; the work is in the families
(one module each), verify.py (correctness and speed) and runner.py (the loop).

A remedy is applied to a *candidate*: an independent copy of the workload (gobrrr.state)
plus the global switches to hold around each call and the preparation steps (compile,
graph capture) to run once before timing. Remedies compose by applying them in stage
order to one candidate: first those that mutate the copy (layout, optimizer flags), then
precision wrappers, then execution (compile or CUDA-graph capture of everything above).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from gobrrr.gains import Gain
from gobrrr.phases import is_inference, is_training
from gobrrr.state import Copied, walk

__all__ = ["Context", "Candidate", "RemedySpec", "RemedyResult", "STATUSES",
           "STAGE_MUTATE", "STAGE_PRECISION", "STAGE_EXECUTION", "STAGE_AFTER_EXECUTION",
           "PREP_FLAG", "PREP_CAPTURE", "PREP_COMPILE", "switches_on", "workload_facts",
           "reached_facts"]

# Ordering of application when remedies combine (see module docstring); options of an
# execution remedy (Inductor freezing) come after it.
STAGE_MUTATE, STAGE_PRECISION, STAGE_EXECUTION, STAGE_AFTER_EXECUTION = 0, 1, 2, 3

# What preparing a remedy costs, for the search plan (plan.py): a flag flip or a
# mutation of the copy costs a few calls, a CUDA-graph capture a few more, a compile
# seconds to minutes (estimated from the graph size and the mode).
PREP_FLAG, PREP_CAPTURE, PREP_COMPILE = "flag", "capture", "compile"

# "unverifiable": the reference cannot judge the outputs (not finite, or eager differs
# from itself beyond verify.NOISE_CEILING); timed, never "verified", never the best.
# "skipped": applicable, but the search did not run it (the reason says why: the time
# left, a predicted gain not worth its compile, the --budget-s deadline while timing).
STATUSES = ("verified", "no significant change", "slower", "unverifiable", "rejected",
            "failed", "skipped", "not applicable", "advice")

Progress = Callable[[str], None]


@dataclass
class Context:
    """What every remedy may read: the device, the diagnosis (its budget, ceilings, counted
    ops and experiments: None when diagnose was skipped), and facts about the workload
    (found on the base copy in optimize, on the user's objects, read only, in doctor)."""

    device: str
    budget: Any | None = None  # gobrrr.budget.Budget
    ceilings: Any | None = None  # gobrrr.hardware.Ceilings
    records: list[Any] = field(default_factory=list)  # counting.OpRecord of one call
    batch: Any | None = None  # experiments.BatchScaling
    graph: Any | None = None  # experiments.GraphReplay
    module_types: set[str] = field(default_factory=set)  # class names of reachable modules
    optimizers: list[Any] = field(default_factory=list)  # read, never run
    # as called by the step (optimize learns it while priming); None: not known (doctor)
    zero_grad_set_to_none: list[bool] | None = None
    independent_copy: bool = True  # False: state shared with the user's objects
    # storages of the parameters and buffers of the objects the records were counted on
    # (counting.OpRecord.reads names storages): what Inductor freezing can fold
    param_storages: frozenset[int] = frozenset()
    compile_backend: str = "inductor"  # tests use "eager" where only dynamo is checked
    # "tf32" when eager itself already runs fp32 matmuls/convs in TF32 (cuDNN's default
    # allow_tf32=True for convolutions): any remedy is then judged at TF32's tolerance
    reference_precision: str | None = None
    # a torchrun job's communication facts (remedies/comm.CommFacts), for the DDP and
    # FSDP2 remedies; None in one process
    comm: Any | None = None
    # the DataLoaders the workload iterated (remedies/data.LoaderFacts, in the order
    # first seen) and the measured wait for data (run.DataLoading): a script run in place
    loaders: list[Any] = field(default_factory=list)
    data_loading: Any | None = None
    # the modules' repeated blocks ("GPT2Block x12": remedies/nested.py), which a
    # training step's compile marks as nested compile regions
    repeated_blocks: tuple[str, ...] = ()

    @classmethod
    def from_report(cls, device: str, report: Any | None, records: list[Any],
                    **facts: Any) -> Context:
        """The context of a diagnosed workload (`report` None: no predictions)."""
        if report is None:
            return cls(device, records=records, **facts)
        return cls(device, report.budget, report.ceilings, records, report.batch,
                   report.graph, **facts)

    @property
    def diagnosed(self) -> bool:
        return self.budget is not None and self.ceilings is not None

    @property
    def inference(self) -> bool:
        """The counted call runs no backward and no optimizer step: outputs are all it
        makes, so inference-only remedies (no autograd, a model cast) may apply."""
        return is_inference(self.records)

    @property
    def training(self) -> bool:
        """The counted call runs a backward: a training step."""
        return is_training(self.records)


def reached_facts(w: Any) -> dict[str, Any]:
    """`workload_facts` of what the workload `w` reaches (read only, nothing runs): which
    remedies can apply to it."""
    reach = walk(w.fn, w.args, w.kwargs)
    return workload_facts(reach.modules, reach.optimizers)


def workload_facts(modules: list[Any], optimizers: list[Any]) -> dict[str, Any]:
    """The Context fields that describe what a workload reaches (its modules' class
    names and repeated blocks, its optimizers, its parameters' and buffers' storages),
    read without running anything."""
    from gobrrr.remedies.nested import repeated_blocks

    storages = set()
    for top in modules:
        for t in [*top.parameters(), *top.buffers()]:
            try:
                storages.add(t.untyped_storage().data_ptr())
            except (RuntimeError, NotImplementedError):  # meta, sparse: nothing to fold
                continue
    return {"module_types": {type(m).__name__ for top in modules for m in top.modules()},
            "optimizers": list(optimizers), "param_storages": frozenset(storages),
            "repeated_blocks": repeated_blocks(modules)}


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
    does); `predict` its whole-workload gain from the diagnosis (gobrrr.gains: the same
    function gives the doctor report's prediction and optimize's); `apply` changes the
    candidate (a copy) and may raise: the harness records the reason."""

    name: str
    family: str
    regime: str
    stage: int
    group: str  # remedies of one group exclude each other in combinations
    applies: Callable[[Context], str | None]
    predict: Callable[[Context], Gain]
    apply: Callable[[Candidate, Context], Candidate]
    snippet: str  # what the user pastes to apply it
    title: str = ""  # the doctor report's name for it
    how: str = ""  # one line: what to do (the doctor report's "how")
    precision: str | None = None  # lowers precision: compared under its tolerance
    advice_only: bool = False  # never applied (batch size)
    prep: str = PREP_FLAG  # PREP_FLAG | PREP_CAPTURE | PREP_COMPILE: its cost class
    compile_mode: str | None = None  # for PREP_COMPILE: "default" | "reduce-overhead" | ...
    # Kept in the stack of cheap remedies under a compile even without a measured gain
    # alone: its gain shows under torch.compile (inference mode: no autograd, an
    # inference graph) or it makes the compile cheaper (a fused optimizer: one kernel,
    # not a traced foreach loop).
    keep_when_neutral: bool = False
    excludes: tuple[str, ...] = ()  # remedies it cannot be combined with
    # Distributed remedies (ddp.py, fsdp.py): the DDP constructor arguments or FSDP2
    # setters it changes; the lockstep harness rebuilds a wrapper once with the union of
    # a combination's settings (dist/optimize.py)
    settings: Mapping[str, Any] | None = None
    # The snippet written for the user's own objects (their DataLoader's arguments),
    # where the context holds them; `snippet` is the generic one
    snippet_for: Callable[[Context], str] | None = None

    def snippet_in(self, ctx: Context) -> str:
        return self.snippet_for(ctx) if self.snippet_for is not None else self.snippet


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


@contextlib.contextmanager
def switches_on(cand: Candidate) -> Iterator[None]:
    """Hold the candidate's global switches (TF32 flags, ...); each restores its own
    state on exit, also when the call raises."""
    with contextlib.ExitStack() as stack:
        for s in cand.switches:
            stack.enter_context(s())
        yield
