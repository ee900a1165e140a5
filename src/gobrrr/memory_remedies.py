"""What the memory buys (issue 26, item 3): remedies that trade time for memory, each
applied to a copy of the workload, verified against the plain step, and measured for
the memory it saves and the time it costs (`gobrrr memory --remedies`, the JSON's
`remedies`).

The remedies (MEMORY_REMEDIES): activation checkpointing per block, full and selective
(remedies/checkpoint.py); zero_grad(set_to_none=True) and the fused optimizer (no
foreach temporaries), bf16 autocast and (inference only) bf16 weights, whose mechanisms
are the speed catalog's own (remedies/optim.py, precision.py: one implementation each);
PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True, which the allocator reads once, when
CUDA starts, so it is measured in two fresh processes (`gobrrr memory TARGET` without
and with it: their allocators' reserved bytes), only for a target given by name on CUDA.

For each, in this order, on copies of one primed base (remedies/runner.base_copy: a
fresh build from the factory, or a deep copy; the user's objects are never run):
1. verified: the copy's two calls from one RNG state against the plain reference's
   (outputs, every parameter's update over the first call, the gradients:
   remedies/updates.judge), at the tolerance of its precision, grown for eager's own
   noise (two plain copies compared);
2. its peak: one step under MemTracker (memory.measure_memory, after a warm call), and
   on CUDA the allocator's: max_memory_allocated over one call, less what was allocated
   before it, plus the copy's own resident tensors (parameters, buffers, gradients,
   optimizer state, inputs): the step's own peak, though the reference and the base
   stay allocated beside it. The allocator's is the headline on CUDA (`peak_source`);
   its rounding makes it approximate to a few hundred bytes per tensor;
3. its time: interleaved A/B against the reference (remedies/verify.ab_time), each
   side's median per step; `time_cost` = after / before, with the 95% interval.
A remedy that fails verification is still measured (status "rejected"): what it would
save is worth knowing, and it is never called verified.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

from gobrrr.errors import WARNING, first_line
from gobrrr.memory import measure_memory
from gobrrr.memory_fit import ChildFailed, child_memory, free_memory
from gobrrr.remedies import catalog, checkpoint
from gobrrr.remedies.base import Candidate, Context
from gobrrr.remedies.evaluate import out_dtype
from gobrrr.remedies.runner import base_copy, prime
from gobrrr.remedies.updates import RunOut, judge, nondeterminism, run_calls
from gobrrr.remedies.verify import ab_time
from gobrrr.state import Copied, copy_workload, preserved_state
from gobrrr.timing import device_sync
from gobrrr.workload import Workload

__all__ = ["MemoryRemedy", "MemoryRemedyResult", "MemoryRemedies", "Facts",
           "MEMORY_REMEDIES", "memory_remedies", "names", "select", "EXPANDABLE"]

Progress = Callable[[str], None]
EXPANDABLE = "expandable_segments:True"
AB_BUDGET_S = 1.0  # A/B seconds per remedy (at least verify.AB_MIN_ROUNDS rounds)


@dataclass
class Facts:
    """What the remedies' `applies` read, found on the primed base (read only)."""

    device: str
    modules: list[Any]
    optimizers: list[Any]
    trains: bool  # a backward ran: some parameter has a gradient after the call
    zero_grad_calls: list[bool]  # set_to_none of each zero_grad call while priming
    independent: bool  # the copies share nothing with the user's objects
    target: str | None = None  # a target by name: fresh processes can rebuild it
    target_words: list[str] = field(default_factory=list)

    def context(self) -> Context:
        """The speed catalog's Context, for the specs whose `applies` and `apply` are
        reused here."""
        return Context(self.device, module_types={type(m).__name__ for r in self.modules
                                                  for m in r.modules()},
                       optimizers=list(self.optimizers),
                       zero_grad_set_to_none=list(self.zero_grad_calls),
                       independent_copy=self.independent)


@dataclass(frozen=True)
class MemoryRemedy:
    name: str
    title: str
    applies: Callable[[Facts], str | None]  # why not (None: it applies)
    apply: Callable[[Candidate, Context], Candidate] | None  # None: measured apart
    snippet: str
    precision: str | None = None  # "bf16": verified at that tolerance


@dataclass
class MemoryRemedyResult:
    name: str
    title: str
    # verified (applied, verified, measured) | rejected (measured, not verified) |
    # unverifiable | failed | not applicable | measured (expandable segments: nothing
    # to verify)
    status: str
    reason: str
    applied: bool = False
    verified: bool = False
    verification: dict[str, Any] = field(default_factory=dict)  # per quantity, judge's
    peak_source: str = ""  # "MemTracker" | "CUDA allocator" | "CUDA allocator, reserved"
    peak_bytes_before: int | None = None
    peak_bytes_after: int | None = None
    bytes_saved: int | None = None  # before - after (negative: it costs memory)
    tracker_peak_bytes_before: int | None = None  # MemTracker's, beside the allocator's
    tracker_peak_bytes_after: int | None = None
    by_category_before: dict[str, int] = field(default_factory=dict)  # at the peak
    by_category_after: dict[str, int] = field(default_factory=dict)
    step_s_before: float | None = None  # A/B medians per step
    step_s_after: float | None = None
    time_cost: float | None = None  # step_s_after / step_s_before
    time_cost_interval: tuple[float, float] | None = None  # 95% bootstrap
    ab_rounds: int | None = None
    notes: list[str] = field(default_factory=list)
    snippet: str = ""

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["time_cost_interval"] = (list(self.time_cost_interval)
                                   if self.time_cost_interval else None)
        return d


@dataclass
class MemoryRemedies:
    results: list[MemoryRemedyResult]
    notes: list[str]


# ---------------------------------------------------------------- the remedies


def _spec(name: str) -> Any:
    return catalog.by_name()[name]


def _needs_copy(f: Facts) -> str | None:
    return None if f.independent else ("the workload's modules or optimizers could not be "
                                       "copied apart from yours")


def _applies_full(f: Facts) -> str | None:
    return _needs_copy(f) or checkpoint.blocks_reason(f.modules, f.trains)


def _applies_selective(f: Facts) -> str | None:
    return _needs_copy(f) or checkpoint.selective_reason(f.modules, f.trains)


def _applies_zero(f: Facts) -> str | None:
    if not f.trains:
        return "the step runs no backward: no gradients to free"
    return _spec("zero_grad_set_to_none").applies(f.context())  # type: ignore[no-any-return]


def _applies_fused(f: Facts) -> str | None:
    return _spec("fused_optimizer").applies(f.context())  # type: ignore[no-any-return]


def _fp32_modules(f: Facts) -> bool:
    import torch

    return any(p.dtype == torch.float32 for r in f.modules for p in r.parameters())


def _applies_autocast(f: Facts) -> str | None:
    if not _fp32_modules(f):
        return "no fp32 parameters for autocast to run in bf16"
    return None


def _applies_cast(f: Facts) -> str | None:
    if f.trains:
        return ("the step trains: a bf16 model would also update its weights in bf16, "
                "where an update smaller than 2^-8 of a weight is lost (use bf16 "
                "autocast, which keeps fp32 weights)")
    if not _fp32_modules(f):
        return "no fp32 parameters to cast"
    return _needs_copy(f)


def _applies_expandable(f: Facts) -> str | None:
    import os

    if f.device != "cuda":
        return "a setting of the CUDA caching allocator"
    if "expandable_segments:true" in os.environ.get("PYTORCH_CUDA_ALLOC_CONF", "").lower():
        return "PYTORCH_CUDA_ALLOC_CONF already has expandable_segments:True"
    if not f.target:
        return ("the allocator reads PYTORCH_CUDA_ALLOC_CONF once, when CUDA starts, so it "
                "is measured in fresh processes, which can rebuild only a target given by "
                "name (advice: set it before the first CUDA call)")
    return None


MEMORY_REMEDIES: list[MemoryRemedy] = [
    MemoryRemedy("checkpoint_blocks", "activation checkpointing per block",
                 _applies_full, checkpoint.apply_full,
                 "from torch.utils.checkpoint import checkpoint\n"
                 "# in the model's forward, for each repeated block:\n"
                 "x = checkpoint(block, x, use_reentrant=False)\n"
                 "# transformers: model.gradient_checkpointing_enable("
                 "{'use_reentrant': False})"),
    MemoryRemedy("checkpoint_blocks_selective",
                 "selective checkpointing per block (pointwise ops recomputed)",
                 _applies_selective, checkpoint.apply_selective,
                 "import functools\n"
                 "from torch.utils.checkpoint import checkpoint, "
                 "create_selective_checkpoint_contexts\n"
                 "# policy: MUST_SAVE matmuls/attention, PREFER_RECOMPUTE pointwise ops "
                 "(gobrrr.remedies.checkpoint.pointwise_policy())\n"
                 "ctx = functools.partial(create_selective_checkpoint_contexts, policy)\n"
                 "x = checkpoint(block, x, use_reentrant=False, context_fn=ctx)"),
    MemoryRemedy("zero_grad_set_to_none", "zero_grad(set_to_none=True)", _applies_zero,
                 lambda c, ctx: _spec("zero_grad_set_to_none").apply(c, ctx),
                 "opt.zero_grad(set_to_none=True)"),
    MemoryRemedy("fused_optimizer", "fused optimizer (no foreach temporaries)",
                 _applies_fused, lambda c, ctx: _spec("fused_optimizer").apply(c, ctx),
                 "opt = torch.optim.AdamW(model.parameters(), lr=..., fused=True)"),
    MemoryRemedy("bf16_autocast", "bf16 autocast (bf16 activations, fp32 weights)",
                 _applies_autocast, lambda c, ctx: _spec("bf16_autocast").apply(c, ctx),
                 "with torch.autocast(device_type, dtype=torch.bfloat16):\n"
                 "    loss = model(x).loss", precision="bf16"),
    MemoryRemedy("bf16_weights", "bf16 weights (inference)", _applies_cast,
                 lambda c, ctx: _spec("bf16_cast").apply(c, ctx),
                 "model = model.to(torch.bfloat16)", precision="bf16"),
    MemoryRemedy("expandable_segments", "PYTORCH_CUDA_ALLOC_CONF=" + EXPANDABLE,
                 _applies_expandable, None,
                 f"PYTORCH_CUDA_ALLOC_CONF={EXPANDABLE} python train.py"),
]


def names() -> list[str]:
    return [r.name for r in MEMORY_REMEDIES]


# ---------------------------------------------------------------- measuring


@dataclass
class _Peak:
    peak_bytes: int  # the headline: the allocator's on CUDA, MemTracker's on CPU
    source: str
    tracker_bytes: int
    by_category: dict[str, int]


def _resident_bytes(c: Copied) -> int:
    """Bytes of the copy's own tensors that live across steps (each storage once)."""
    import torch

    seen: dict[int, int] = {}

    def add(t: Any) -> None:
        if isinstance(t, torch.Tensor) and t.device.type == "cuda":
            s = t.untyped_storage()
            seen[s.data_ptr()] = s.nbytes()

    for m in c.modules:
        for t in [*m.parameters(), *m.buffers()]:
            add(t)
            add(t.grad)
    for o in c.optimizers:
        for st in o.state.values():
            for v in st.values():
                add(v)
    for t in c.tensors:
        add(t)
    return sum(seen.values())


def _allocator_peak(c: Copied, device: str) -> int:
    """One call's own peak from the CUDA allocator (module docstring, step 2)."""
    import torch

    sync = device_sync(device)
    sync()
    own = _resident_bytes(c)
    before = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    c.fn(*c.args, **c.kwargs)
    sync()
    return int(torch.cuda.max_memory_allocated() - before + own)


def _peak(c: Copied, name: str, device: str) -> _Peak:
    prof = measure_memory(Workload(name, c.fn, c.args, c.kwargs, device))
    if device == "cuda":
        return _Peak(_allocator_peak(c, device), "CUDA allocator", prof.peak_bytes,
                     dict(prof.by_category))
    return _Peak(prof.peak_bytes, "MemTracker", prof.peak_bytes, dict(prof.by_category))


def _candidate(base: Copied) -> Candidate:
    w = copy_workload(base.fn, base.args, base.kwargs)
    return Candidate(w.fn, w.args, w.kwargs, w.modules, w.optimizers, w.tensors)


def _trains(c: Copied) -> bool:
    return any(p.grad is not None for m in c.modules for p in m.parameters())


@dataclass
class _Reference:
    work: Candidate
    run: RunOut
    nondet: dict[str, dict[str, float]]
    out_dtype: str
    peak: _Peak


def _reference(base: Copied, device: str, say: Progress) -> _Reference:
    say("reference: the plain step, twice from one state, on two copies")
    work, twin = _candidate(base), _candidate(base)
    run = run_calls(work, device)
    nondet = nondeterminism(run, run_calls(twin, device))
    del twin
    free_memory(device)
    say("reference: its peak (MemTracker)")
    return _Reference(work, run, nondet, out_dtype(run.outputs),
                      _peak(work, "the plain step", device))


def _verify(res: MemoryRemedyResult, ref: _Reference, cand: Candidate, device: str,
            precision: str | None) -> None:
    verdict = judge(ref.run, run_calls(cand, device), ref.out_dtype, precision, ref.nondet)
    res.verified = bool(verdict["ok"])
    res.verification = verdict["checks"]
    if not res.verified:
        unverifiable = all("unverifiable" in c for c in verdict["checks"].values()
                           if not c.get("ok", False))
        res.status = "unverifiable" if unverifiable else "rejected"
        res.reason = "; ".join(verdict["reasons"])


def _measure(res: MemoryRemedyResult, ref: _Reference, cand: Candidate, device: str,
             ab_budget_s: float) -> None:
    after = _peak(cand, res.name, device)
    before = ref.peak
    res.peak_source = after.source
    res.peak_bytes_before, res.peak_bytes_after = before.peak_bytes, after.peak_bytes
    res.bytes_saved = before.peak_bytes - after.peak_bytes
    res.tracker_peak_bytes_before = before.tracker_bytes
    res.tracker_peak_bytes_after = after.tracker_bytes
    res.by_category_before, res.by_category_after = before.by_category, after.by_category
    ab = ab_time(lambda: ref.work.call(), cand.call, device=device, budget_s=ab_budget_s)
    res.step_s_before, res.step_s_after = ab.eager_s, ab.candidate_s
    res.time_cost = ab.candidate_s / ab.eager_s if ab.eager_s > 0 else None
    lo, hi = ab.interval  # of eager / candidate: the cost's interval is its inverse
    res.time_cost_interval = (1 / hi if hi > 0 else math.inf, 1 / lo if lo > 0 else math.inf)
    res.ab_rounds = ab.rounds


def _run_one(r: MemoryRemedy, base: Copied, ref: _Reference, facts: Facts,
             ab_budget_s: float) -> MemoryRemedyResult:
    res = MemoryRemedyResult(r.name, r.title, "verified", "", snippet=r.snippet)
    assert r.apply is not None
    try:
        cand = r.apply(_candidate(base), facts.context())
        res.applied = True
        res.notes += cand.notes
        _verify(res, ref, cand, facts.device, r.precision)
        _measure(res, ref, cand, facts.device, ab_budget_s)
    except Exception as exc:  # noqa: BLE001 - the remedy's failure is a result, not a crash
        res.status = "failed"
        res.reason = ("applying: " if not res.applied else "running: ") + first_line(exc)
    if res.status == "verified":
        res.reason = _summary(res)
    elif res.status in ("rejected", "unverifiable") and res.bytes_saved is not None:
        res.reason += f" (measured anyway: {_summary(res)})"
    return res


def _summary(res: MemoryRemedyResult) -> str:
    """One line: what it saved, for what time (numbers of this result only)."""
    assert res.peak_bytes_before is not None and res.bytes_saved is not None
    saved, before = res.bytes_saved, res.peak_bytes_before
    share = saved / before if before else 0.0
    what = (f"peak -{share:.0%} ({saved / 2**20:.1f} MiB saved)" if saved > 0 else
            f"peak +{-share:.0%} ({-saved / 2**20:.1f} MiB more)" if saved < 0 else
            "peak unchanged")
    cost = (f"{res.time_cost:.2f}x the step time" if res.time_cost is not None
            else "step time not measured")
    return f"{what}, {cost}"


def _expandable(r: MemoryRemedy, facts: Facts, say: Progress) -> MemoryRemedyResult:
    """Two fresh `gobrrr memory` processes, without and with the setting: their
    allocators' reserved bytes (what the device holds for the step)."""
    res = MemoryRemedyResult(r.name, r.title, "measured", "", snippet=r.snippet,
                             peak_source="CUDA allocator, reserved (fresh processes)")
    assert facts.target is not None
    words = ["--device", "cuda", *facts.target_words]
    try:
        say("expandable segments: the step in a fresh process, without the setting")
        plain = child_memory(facts.target, words, env={"PYTORCH_CUDA_ALLOC_CONF": None},
                             what="the plain process")
        say("expandable segments: the step in a fresh process, with it")
        exp = child_memory(facts.target, words,
                           env={"PYTORCH_CUDA_ALLOC_CONF": EXPANDABLE},
                           what="the expandable-segments process")
    except ChildFailed as exc:
        res.status, res.reason = "failed", f"running: {exc}"
        return res
    res.applied = True
    a, b = plain.get("allocator") or {}, exp.get("allocator") or {}
    res.peak_bytes_before = a.get("max_reserved_bytes")
    res.peak_bytes_after = b.get("max_reserved_bytes")
    res.tracker_peak_bytes_before = plain.get("peak_bytes")
    res.tracker_peak_bytes_after = exp.get("peak_bytes")
    if res.peak_bytes_before is None or res.peak_bytes_after is None:
        res.status, res.reason = "failed", "a process reported no allocator figures"
        return res
    res.bytes_saved = res.peak_bytes_before - res.peak_bytes_after
    res.verification = {"skipped": "an allocator setting: the same kernels on the same "
                                   "data, nothing compared"}
    res.notes.append("step time not measured: each setting lives in its own process, "
                     "and timing across processes reads each process's own noise")
    res.reason = (f"reserved {res.peak_bytes_before / 2**20:.0f} MiB -> "
                  f"{res.peak_bytes_after / 2**20:.0f} MiB (max allocated "
                  f"{a.get('max_allocated_bytes', 0) / 2**20:.0f} -> "
                  f"{b.get('max_allocated_bytes', 0) / 2**20:.0f} MiB)")
    return res


# ---------------------------------------------------------------- the run


def select(only: list[str] | None) -> list[MemoryRemedy]:
    """The remedies named in `only` (comma-separated items), all when None; an unknown
    name is a UserError."""
    if not only:
        return list(MEMORY_REMEDIES)
    wanted = [n.strip() for item in only for n in item.split(",") if n.strip()]
    by = {r.name: r for r in MEMORY_REMEDIES}
    unknown = [n for n in wanted if n not in by]
    if unknown or not wanted:
        from gobrrr.errors import UserError

        raise UserError(f"unknown memory remedy {', '.join(unknown) or repr('')}; choose "
                        f"from {', '.join(by)}")
    return [by[n] for n in wanted]


def memory_remedies(w: Workload, *, only: list[str] | None = None,
                    target: str | None = None, target_words: list[str] | None = None,
                    ab_budget_s: float = AB_BUDGET_S,
                    progress: Progress | None = None) -> MemoryRemedies:
    """Each memory remedy that applies, on copies of `w`: verified, its peak and its
    step time against the plain step's (module docstring). `target`, `target_words`:
    the target's name and options, for the fresh processes of expandable segments."""
    say = progress or (lambda _m: None)
    chosen = select(only)
    notes: list[str] = []
    results: list[MemoryRemedyResult] = []
    with preserved_state(w) as state:
        base, independent = base_copy(w, notes)
        zero_calls = prime(base, w)
        facts = Facts(w.device, base.modules, base.optimizers, _trains(base), zero_calls,
                      independent, target, list(target_words or []))
        applicable = []
        for r in chosen:
            why = r.applies(facts)
            if why:
                results.append(MemoryRemedyResult(r.name, r.title, "not applicable", why,
                                                  snippet=r.snippet))
            else:
                applicable.append(r)
        ref = (_reference(base, w.device, say)
               if any(r.apply is not None for r in applicable) else None)
        for r in applicable:
            if r.apply is None:
                results.append(_expandable(r, facts, say))
                continue
            assert ref is not None
            say(f"{r.name}: applied to a copy, verified, its peak and its step time")
            results.append(_run_one(r, base, ref, facts, ab_budget_s))
            free_memory(w.device)
    notes = [f"{WARNING}{line}" for line in state.warnings] + notes
    order = {r.name: i for i, r in enumerate(MEMORY_REMEDIES)}
    results.sort(key=lambda x: order[x.name])
    return MemoryRemedies(results, notes)
