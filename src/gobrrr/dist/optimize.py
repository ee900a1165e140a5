"""`gobrrr optimize` under torchrun: the distributed remedies (dist/remedies.py) applied to
copies of the workload on every rank, verified and timed in lockstep; rank 0 writes the
result in optimize's own format (remedies/result.py).

Every rank, in this order:
1. the distributed diagnosis (dist/diagnose.py; its own lockstep stages), unless
   --no-diagnose: rank 0's budget and the merged section give the predictions' facts;
2. the base: the target's factory again on every rank (a fresh DDP or FSDP2 build, its
   constructor collective), primed with one call (DDP);
3. the reference: two copies of the base, two calls each from the same RNG state; each
   gives its outputs and the update of every parameter over the first call (p1 - p0, in
   fp64 from the fp32 values: exact) and the gradients after it;
4. each candidate, in the order rank 0 decides (predicted gain, catalog order) and
   broadcasts, while its estimated cost fits before the deadline (rank 0's clock):
   a copy (DDP: a deep copy of the base whose DDP is re-wrapped around its `module` with
   the new settings, on the same process group, and every reference to the old wrapper in
   the copy swapped for the new one; FSDP2: a fresh build from the factory with the
   settings changed), 3 warm calls, the starting state restored in place, the reference's
   two calls, compared (outputs, parameter updates, gradients) on every rank, verified
   only when every rank passes; then interleaved A/B timing in lockstep;
5. the winners together (one per group), when at least two won.
Every decision is rank 0's and every attempt ends in an exchange of statuses
(`_attempt`): a rank whose candidate raises makes every rank record the same failure,
and every rank makes exactly the same calls, so no collective waits for a peer that
never issues it.

Verification: remedies that keep the numerics (bucket size, gradient_as_bucket_view,
static_graph, FSDP2's settings) at fp32's elementwise tolerance; the bf16 compression hook
rounds the gradients, so the update of the parameters after one step is judged at bf16's
relative-L2 tolerance and cosine (verify.LOWER_PRECISION_RTOL, MIN_COSINE), with the
outputs. The parameters themselves would say nothing: they move by lr x grad, a change
far below their own size.
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from gobrrr.dist.lockstep import DistError, Lockstep, World, setup
from gobrrr.dist.remedies import (
    CATALOG,
    DistFacts,
    DistRemedy,
    catalog_for,
    combined_gain,
    find_ddps,
    find_fsdp,
)
from gobrrr.errors import WARNING, UserError, first_line
from gobrrr.gains import Gain
from gobrrr.remedies.base import RemedyResult

from gobrrr.remedies.evaluate import WARM_CALLS
from gobrrr.remedies.verify import ab_time

__all__ = ["DistOptimizeOptions", "optimize_distributed", "facts_from",
           "RunOut", "judge"]

Progress = Callable[[str], None]



@dataclass
class DistOptimizeOptions:
    budget_s: float = 120.0
    timeout_s: float = 60.0
    diagnose: bool = True
    ab_budget_s: float = 1.0
    only: list[str] | None = None


# ------------------------------------------------------------------ agreement


def _attempt(ls: Lockstep, what: str, fn: Callable[[], Any]) -> tuple[Any, str | None]:
    """(value, None) when every rank's `fn` succeeded, else (None, the first failing
    rank's line) on every rank: a candidate's failure is a result, not the end of the
    run. A peer that never arrives still times out (DistError)."""
    try:
        value, mine = fn(), None
    except DistError:
        raise
    except Exception as exc:  # noqa: BLE001 - the candidate's failure, recorded
        value, mine = None, first_line(exc)
    got = ls.all_gather(mine, what)
    failed = [(r, line) for r, line in enumerate(got) if line is not None]
    if failed:
        r, line = failed[0]
        return None, f"rank {r}: {line}"
    return value, None


# ------------------------------------------------------------------ calls and checks


@dataclass
class RunOut:
    """Two calls from one state: outputs, each parameter's update over the first call
    (fp64), and the gradients after it (None where a parameter has none)."""

    outputs: list[Any]
    updates: list[Any]
    grads: list[Any]
    # one unit in the last place of each parameter after the step (fp64): the storage
    # rounding of p1, which an update smaller than the parameter cannot be read below
    ulps: list[Any] = field(default_factory=list)


def _local(t: Any) -> Any:
    """A DTensor's local shard (FSDP2: each rank compares its own; no collective)."""
    return t.to_local() if hasattr(t, "to_local") else t


def _params(modules: list[Any]) -> list[Any]:
    seen: dict[int, Any] = {}
    for m in modules:
        for p in m.parameters():
            if p.requires_grad:
                seen.setdefault(id(p), p)
    return list(seen.values())


def _run_calls(c: Any, device: str) -> RunOut:
    import torch

    from gobrrr.remedies.evaluate import SEED
    from gobrrr.state import clone_tree
    from gobrrr.timing import device_sync

    sync = device_sync(device)
    params = _params(c.modules)
    with torch.no_grad():
        p0 = [_local(p).detach().double() for p in params]
    torch.manual_seed(SEED)
    if device == "cuda":
        torch.cuda.manual_seed_all(SEED)
    out1 = clone_tree(c.fn(*c.args, **c.kwargs))
    sync()
    with torch.no_grad():
        p1 = [_local(p).detach() for p in params]
        upd = [b.double() - a for b, a in zip(p1, p0, strict=True)]
        ulps = [(torch.nextafter(b.abs(), torch.full_like(b, math.inf)) - b.abs()).double()
                for b in p1]
        grads = [None if p.grad is None else _local(p.grad).detach().clone() for p in params]
    out2 = clone_tree(c.fn(*c.args, **c.kwargs))
    sync()
    return RunOut([out1, out2], upd, grads, ulps)


def update_error(ref: RunOut, cand: RunOut, measure: str) -> float:
    """How far the candidate's parameter updates are from the reference's, beyond one
    ulp of the parameter per element (both sides store p1 rounded to its format, so two
    correct updates may differ by up to one ulp): relative L2 of the excess over
    ||update||, or elementwise excess / (|update| + rms(update)). At a small learning
    rate the update is a few ulps of the parameter, and the rounding alone would read as
    a large relative error; the parameters themselves would read as equal whatever the
    gradients were."""
    import torch

    worst = 0.0
    for r, c, ulp in zip(ref.updates, cand.updates, ref.ulps, strict=True):
        if r.numel() == 0:
            continue
        if not torch.isfinite(c).all():
            return math.inf
        excess = ((c - r).abs() - ulp).clamp(min=0.0)
        if measure == "relative_l2":
            norm = r.norm().item()
            err = excess.norm().item() / norm if norm else (
                0.0 if excess.max().item() == 0 else math.inf)
        else:
            rms = r.pow(2).mean().sqrt().item()
            err = float((excess / (r.abs() + (rms if rms > 0 else 1.0))).max().item())
        worst = max(worst, err)
    return worst


def _grad_pairs(a: RunOut, b: RunOut) -> tuple[list[Any], list[Any]]:
    pairs = [(x, y) for x, y in zip(a.grads, b.grads, strict=True)
             if x is not None and y is not None]
    return [p[0] for p in pairs], [p[1] for p in pairs]


def nondeterminism(ref: RunOut, twin: RunOut) -> dict[str, dict[str, float]]:
    """Eager vs eager, per quantity and measure."""
    from gobrrr.remedies.verify import compare

    rg, tg = _grad_pairs(ref, twin)
    quantities = {"outputs": (ref.outputs, twin.outputs), "grads": ([rg], [tg])}
    out = {q: {m: compare(r, t, m, 0.0).max_error for m in ("elementwise", "relative_l2")}
           for q, (r, t) in quantities.items()}
    out["updates"] = {m: update_error(ref, twin, m) for m in ("elementwise", "relative_l2")}
    return out


def judge(ref: RunOut, cand: RunOut, out_dtype: str, precision: str | None,
          nondet: dict[str, dict[str, float]]) -> dict[str, Any]:
    """This rank's verdict on a candidate: each quantity against the reference at the
    tolerance of its precision (grown for eager's own noise); ok only when all pass."""
    from gobrrr.remedies.verify import Comparison, compare, tolerance_given_noise

    rg, cg = _grad_pairs(ref, cand)
    quantities = {"outputs": (ref.outputs, cand.outputs, out_dtype),
                  "updates": ([], [], "float32"), "grads": ([rg], [cg], "float32")}
    checks: dict[str, Any] = {}
    ok, reasons = True, []
    for q, (r, c, dtype) in quantities.items():
        tol = tolerance_given_noise(dtype, precision, nondet.get(q, {}))
        if tol.unverifiable:
            checks[q] = {"unverifiable": tol.unverifiable}
            ok = False
            reasons.append(f"{q}: {tol.unverifiable}")
            continue
        if q == "updates":  # the parameters after one step (update_error)
            err = update_error(ref, cand, tol.measure)
            desc = ("elementwise rtol" if tol.measure == "elementwise" else
                    "relative L2 <=") + f" {tol.rtol:g} beyond 1 ulp of the parameter"
            got = Comparison(err <= tol.rtol, err, desc, "" if err <= tol.rtol else
                             f"error {err:.3g} over the tolerance {tol.rtol:g}")
        else:
            got = compare(r, c, tol.measure, tol.rtol, tol.min_cosine)
        checks[q] = {"ok": got.ok, "max_error": got.max_error, "tolerance": got.tolerance,
                     "cosine_min": got.cosine}
        if not got.ok:
            ok = False
            reasons.append(f"{q}: {got.reason}")
    return {"ok": ok, "checks": checks, "reasons": reasons}


# ------------------------------------------------------------------ facts


def _grad_bytes(modules: list[Any]) -> tuple[int, ...]:
    """Per parameter requiring grad, registration order, unsharded (a DTensor's numel is
    the global one)."""
    return tuple(p.numel() * p.element_size() for p in _params(modules))


def facts_from(report: Any, kind: str, world_size: int, modules: list[Any]
               ) -> tuple[DistFacts | None, list[str]]:
    """The predictions' inputs from the distributed diagnosis (module docstring of
    dist/remedies.py), and notes on where each came from."""
    notes: list[str] = []
    if report is None:
        return None, ["no diagnosis (--no-diagnose): no predictions"]
    b = report.budget
    d = getattr(report, "distributed", None) or {}
    bounds = [r["no_sync"]["bound_s"] for r in d.get("ranks", [])
              if r.get("no_sync") and r["no_sync"].get("bound_s") is not None]
    busbw: Callable[[float], float] | None = None
    source = ""
    try:
        from gobrrr.dist.ceilings import load_cached

        cached = load_cached()
    except Exception:  # noqa: BLE001 - no cache, or no topology: the achieved figure
        cached = None
    if cached is not None:
        curve = cached

        def busbw_fn(s: float) -> float:
            return curve.busbw_at("all_reduce", s)

        busbw, source = busbw_fn, "busbw from calibrate --distributed's curve"
    else:
        achieved = [c["busbw_gbps"] for c in d.get("collectives", [])
                    if c.get("collective") == "all_reduce" and c.get("busbw_gbps")]
        if achieved:
            bw = statistics.median(achieved) * 1e9
            busbw = (lambda _s, bw=bw: bw)  # noqa: E731
            source = (f"this step's achieved all-reduce busbw {bw / 1e9:.3g} GB/s, no "
                      "per-call latency (run gobrrr calibrate --distributed for the "
                      "size-dependent curve)")
    ddps = find_ddps(modules)
    cap = None
    if ddps:
        cap_b = getattr(ddps[0], "bucket_bytes_cap", None)
        if cap_b is not None and cap_b != 25 * 2**20:
            cap = cap_b / 2**20
    grads = _grad_bytes(modules)
    comm = b.communication_s if b.communication_s is not None else 0.0
    facts = DistFacts(kind, world_size, b.wall_s, comm, grads,
                      getattr(report.ceilings, "bandwidth_bytes_per_s", None), busbw, source,
                      max(bounds) if bounds else None, cap, sum(grads))
    return facts, notes


# ------------------------------------------------------------------ the run


@dataclass
class _State:
    ls: Lockstep
    device: str
    kind: str
    base: Any  # state.Copied (DDP: primed base; FSDP2: unused, fresh builds)
    load: Callable[[], Any]
    ref: RunOut | None = None
    ref_work: Any = None
    nondet: dict[str, dict[str, float]] = field(default_factory=dict)
    out_dtype: str = "float32"
    call_s: float = 0.0


def _copy(st: _State, settings: dict[str, Any] | None = None) -> tuple[Any, list[str]]:
    """A fresh copy of the workload with `settings` (none: as the user wrote it). DDP: a
    deep copy of the base, its wrapper rebuilt around the copied module (the reference
    too, so both sides of every A/B are wrappers built the same way); FSDP2: a fresh build from the factory, its settings changed."""
    from gobrrr.dist.remedies import apply_fsdp
    from gobrrr.state import copy_workload, describe

    if st.kind == "ddp":
        c = copy_workload(st.base.fn, st.base.args, st.base.kwargs)
        return _rewrap(c, dict(settings or {}))
    w = st.load()
    c = describe(w.fn, w.args, w.kwargs)
    return c, (apply_fsdp(c.modules, settings) if settings else [])


def _apply(st: _State, specs: list[DistRemedy]) -> tuple[Any, list[str]]:
    settings: dict[str, Any] = {}
    for s in specs:
        settings.update(s.settings)
    return _copy(st, settings)


def _rewrap(c: Any, settings: dict[str, Any]) -> tuple[Any, list[str]]:
    """The copy `c` with its DDP wrapper rebuilt with `settings` (rewrap_ddp), every
    reference to the old wrapper swapped for the new one."""
    from gobrrr.dist.remedies import rewrap_ddp, swap_references
    from gobrrr.state import describe

    (old,) = find_ddps(c.modules)
    new = rewrap_ddp(old, settings)
    fn, args, n = swap_references(c.fn, c.args, c.kwargs, old, new)
    if n == 0:
        raise RuntimeError("the DDP module is not referenced where gobrrr can swap it "
                           "(closure, global, attribute, container, argument)")
    # The old wrapper's reducer has autograd hooks on the very parameters the new one
    # wraps: drop it now (its destructor removes them), not whenever the cyclic GC
    # collects the old wrapper, which happens at a different moment on each rank
    for attr in ("logger", "reducer"):
        if hasattr(old, attr):
            delattr(old, attr)
    del old
    shown = {k: v for k, v in settings.items() if k != "process_group"}
    return describe(fn, args, c.kwargs), [f"re-wrapped in DDP({shown}), {n} "
                                          "reference(s) swapped"]


def _evaluate(st: _State, specs: list[DistRemedy], ab_budget_s: float,
              deadline: float) -> RemedyResult:
    from gobrrr.state import plain_state, put_back, restore, snapshot

    ls, name = st.ls, "+".join(s.name for s in specs)
    precision = next((s.precision for s in specs if s.precision), None)
    res = RemedyResult(name, "+".join(dict.fromkeys(s.regime for s in specs)), "failed", "",
                       components=tuple(s.name for s in specs),
                       snippet="\n".join(s.snippet for s in specs))
    got, why = _attempt(ls, f"applying {name}", lambda: _apply(st, specs))
    if why:
        res.reason = f"applying: {why}"
        return res
    cand, notes = got
    res.checks["notes"] = notes

    def call() -> Any:
        return cand.fn(*cand.args, **cand.kwargs)

    def warm() -> None:
        start = snapshot(cand.modules, cand.optimizers, cand.tensors)
        others = plain_state(cand)
        for _ in range(WARM_CALLS):
            call()
        restore(start)
        put_back(others)

    t0 = time.perf_counter()
    _, why = _attempt(ls, f"warming {name}", warm)
    res.compile_s = time.perf_counter() - t0
    if why:
        res.reason = f"running: {why}"
        return res
    out, why = _attempt(ls, f"verifying {name}", lambda: _run_calls(cand, st.device))
    if why:
        res.reason = f"running: {why}"
        return res
    assert st.ref is not None
    mine = judge(st.ref, out, st.out_dtype, precision, st.nondet)
    every = ls.all_gather(mine, f"agreeing on {name}'s verification")
    res.verified = all(v["ok"] for v in every)
    res.checks["verification"] = {f"rank{r}": v["checks"] for r, v in enumerate(every)}
    errors = [c.get("max_error") for v in every for c in v["checks"].values()
              if c.get("max_error") is not None]
    res.max_error = max(errors) if errors else None
    res.tolerance = "; ".join(f"{q} {c['tolerance']}" for q, c in every[0]["checks"].items()
                              if "tolerance" in c)
    if not res.verified:
        bad = next((r, v) for r, v in enumerate(every) if not v["ok"])
        unverifiable = all("unverifiable" in c for c in bad[1]["checks"].values()
                           if not c.get("ok", False))
        res.status = "unverifiable" if unverifiable else "rejected"
        res.reason = f"rank {bad[0]}: " + "; ".join(bad[1]["reasons"])
        if res.status == "rejected":
            return res
    ref_work = st.ref_work

    def ref_call() -> Any:
        return ref_work.fn(*ref_work.args, **ref_work.kwargs)

    ab, why = _attempt(ls, f"timing {name}", lambda: ab_time(
        ref_call, call, device=st.device, budget_s=ab_budget_s, deadline=deadline,
        coordinator=ls))
    if why:
        res.reason = f"timing: {why}"
        return res
    res.measured_speedup, res.interval = ab.speedup, ab.interval
    res.eager_s, res.candidate_s = ab.eager_s, ab.candidate_s
    res.checks["ab_rounds"], res.checks["calls_per_block"] = ab.rounds, ab.calls_per_block
    lo, hi = ab.interval
    timed = (f"{ab.speedup:.2f}x (95% interval {lo:.2f}-{hi:.2f}, {ab.rounds} A/B rounds, "
             "each the slowest rank's time)")
    if res.status == "unverifiable":
        res.reason += f"; measured {timed}, not verified"
        return res
    res.status = {"faster": "verified", "slower": "slower"}.get(ab.change,
                                                                 "no significant change")
    res.reason = timed
    return res


def _build(st: _State, say: Progress) -> None:
    """The reference: two copies, two calls each (module docstring, step 3)."""
    from gobrrr.remedies.evaluate import _out_dtype
    from gobrrr.timing import device_sync

    ls = st.ls
    say("reference: eager, twice from the same state, on every rank")
    ref_work, _ = ls.stage("copying the reference", lambda: _copy(st))
    st.ref = ls.stage("running the reference", lambda: _run_calls(ref_work, st.device))
    twin, _ = ls.stage("copying the reference again", lambda: _copy(st))
    again = ls.stage("running the reference again", lambda: _run_calls(twin, st.device))
    st.ref_work = ref_work
    st.out_dtype = _out_dtype(st.ref.outputs)
    st.nondet = nondeterminism(st.ref, again)
    sync = device_sync(st.device)

    def timed() -> float:
        sync()
        t0 = time.perf_counter()
        twin.fn(*twin.args, **twin.kwargs)
        sync()
        return time.perf_counter() - t0

    st.call_s = max(ls.all_gather(ls.stage("timing one call", timed), "sharing call times"))


def _order(specs: list[DistRemedy], gains: dict[str, Gain]) -> list[DistRemedy]:
    """Largest predicted gain first; no prediction after, in catalog order."""
    return sorted(specs, key=lambda s: (gains[s.name].speedup is None,
                                        -(gains[s.name].speedup or 0.0)))


def _stack(results: list[RemedyResult], by_name: dict[str, DistRemedy]) -> list[DistRemedy]:
    """Per group, the single remedy measured fastest among those verified faster."""
    best: dict[str, RemedyResult] = {}
    for r in results:
        if len(r.components) != 1 or r.status != "verified":
            continue
        g = by_name[r.name].group
        if g not in best or (r.measured_speedup or 0) > (best[g].measured_speedup or 0):
            best[g] = r
    return [by_name[r.name] for r in best.values()]


def _candidates(st: _State, queue: list[list[DistRemedy]],
                by_name: dict[str, DistRemedy], gains: dict[str, Gain],
                facts: DistFacts | None, opts: DistOptimizeOptions, deadline: float,
                world: World, say: Progress) -> list[RemedyResult]:
    """The singles in `queue`, then the stack of their winners (module docstring, steps
    4-5); every decision rank 0's, broadcast."""
    from gobrrr.remedies.plan import measure_s

    ls = st.ls
    results: list[RemedyResult] = []
    per_candidate_s = 2 * st.call_s * (WARM_CALLS + 4) + measure_s(
        st.call_s, opts.ab_budget_s, st.device)
    stacked = False
    while queue or not stacked:
        if not queue:
            stacked = True
            members = _stack(results, by_name) if world.rank == 0 else []
            names = ls.broadcast([m.name for m in members], "agreeing on the stack")
            if len(names) >= 2:
                queue.append([by_name[n] for n in names])
            continue
        combo = queue.pop(0)
        name = "+".join(s.name for s in combo)
        left = deadline - time.perf_counter()
        go = ls.broadcast(left >= per_candidate_s, f"deciding on {name}")
        pred = (combined_gain(facts, [gains[s.name] for s in combo], [s.name for s in combo])
                if facts is not None and len(combo) > 1 else gains[combo[0].name])
        if not go:
            results.append(RemedyResult(
                name, combo[0].regime, "skipped",
                f"needs ~{per_candidate_s:.1f} s; {max(0.0, left):.1f} s of --budget-s left",
                pred.speedup, pred.basis, components=tuple(s.name for s in combo),
                snippet="\n".join(s.snippet for s in combo)))
            continue
        say(f"{'remedy' if len(combo) == 1 else 'combination'} {name}"
            + (f" (predicted {pred.speedup:.2f}x)" if pred.speedup else "")
            + ": apply to a copy on every rank, verify, time A/B in lockstep")
        r = _evaluate(st, combo, opts.ab_budget_s, deadline)
        r.predicted_speedup, r.prediction_basis = pred.speedup, pred.basis
        meas = f" {r.measured_speedup:.2f}x" if r.measured_speedup else ""
        say(f"  -> {r.status}{meas}" + ("" if r.status == "verified" else
                                         f": {r.reason[:120]}"))
        results.append(r)
    return results


def optimize_distributed(world: World, target: str | None, device: str,
                         load: Callable[[], Any], opts: DistOptimizeOptions,
                         progress: Progress | None = None) -> Any:
    """Every rank: the steps of the module docstring. Returns the OptimizeResult on rank
    0 and None elsewhere; raises DistError (every rank) when a rank fails outside a
    candidate."""
    from gobrrr.api import diagnose_budget
    from gobrrr.dist.diagnose import DistOptions, diagnose_distributed, target_fingerprint
    from gobrrr.remedies.result import OptimizeResult, snippet_for

    say = progress or (lambda _m: None)
    t0 = time.perf_counter()
    deadline = t0 + opts.budget_s  # rank 0's clock decides (broadcast)
    wanted = {n.strip() for item in opts.only or [] for n in item.split(",") if n.strip()}
    unknown = wanted - {s.name for s in CATALOG} - {s.group for s in CATALOG}
    if unknown:  # before any work, on every rank alike
        raise UserError(f"unknown distributed remedy {', '.join(sorted(unknown))}; choose "
                        f"from {', '.join(s.name for s in CATALOG)}")
    report = None
    if opts.diagnose:
        per_measurement_s, _ = diagnose_budget(opts.budget_s)
        say(f"diagnosing first, on every rank (~25% of --budget-s {opts.budget_s:g} s)")
        report = diagnose_distributed(world, target, device, load, DistOptions(
            time_budget_s=per_measurement_s, timeout_s=opts.timeout_s, experiments=True),
            progress=say)
    diagnose_s = time.perf_counter() - t0
    ctrl, backend = setup(world, device, opts.timeout_s)
    ls = Lockstep(world, ctrl, opts.timeout_s)
    targets = ls.all_gather(target_fingerprint(target), "checking the target")
    if len(set(targets)) > 1:
        odd = next(r for r, t in enumerate(targets) if t != targets[0])
        raise DistError(f"ranks disagree on the target: rank 0 runs {targets[0]!r}, "
                        f"rank {odd} runs {targets[odd]!r}")
    say("building the base from the factory on every rank")
    w = ls.stage("building the workload", load)
    from gobrrr.state import describe

    base = describe(w.fn, w.args, w.kwargs)
    kind = "ddp" if find_ddps(base.modules) else "fsdp" if find_fsdp(base.modules) else None
    kinds = ls.all_gather(kind, "agreeing on DDP or FSDP2")
    if len(set(kinds)) > 1 or kind is None:
        raise DistError("no DistributedDataParallel or FSDP2 (fully_shard) module reachable "
                        f"from the workload on every rank (found {kinds}): the distributed "
                        "remedies change one of those")
    notes: list[str] = []
    if kind == "ddp":
        ls.stage("priming the base", lambda: w.run("priming the base"))
    else:
        notes.append("FSDP2: every copy is a fresh build from the factory (FSDP2 modules "
                     "cannot be deep-copied); verification assumes the factory builds the "
                     "same weights each call (seed it)")
    facts, fnotes = (facts_from(report, kind, world.size, base.modules)
                     if world.rank == 0 else (None, []))
    notes += fnotes
    specs = catalog_for(kind)
    if wanted:
        specs = [s for s in specs if s.name in wanted or s.group in wanted]
    by_name = {s.name: s for s in specs}
    st = _State(ls, device, kind, base, load)
    _build(st, say)
    results: list[RemedyResult] = []
    gains = {s.name: (s.predict(facts) if facts is not None else
                      Gain.none("no diagnose budget")) for s in specs}
    for s in specs:
        if s.advice_only:
            g = gains[s.name]
            results.append(RemedyResult(s.name, s.regime, "advice", g.basis, g.speedup,
                                        g.basis, components=(s.name,), snippet=s.snippet))
    # The order is rank 0's (only rank 0 has the predictions): every rank must run the
    # same candidate at the same time, or their all-reduces pair with each other's
    order = ls.broadcast([s.name for s in _order([s for s in specs if not s.advice_only],
                                                 gains)], "agreeing on the order")
    queue = [[by_name[n]] for n in order]
    results += _candidates(st, queue, by_name, gains, facts, opts, deadline, world, say)
    if world.rank != 0:
        return None
    verified = [r for r in results if r.status == "verified"]
    best = max(verified, key=lambda r: r.measured_speedup or 0) if verified else None
    notes.append(f"distributed: {world.size} ranks ({backend}), {kind.upper()}; every "
                 "candidate ran on every rank in lockstep, each A/B round timed as its "
                 "slowest rank; the remedies change the DDP/FSDP2 wrapper, so the best "
                 "configuration is the snippet, not a callable")
    if report is not None:
        notes += [n for n in report.notes if n.startswith(WARNING)]

    def best_fn(*_a: Any, **_k: Any) -> Any:
        raise UserError("a distributed configuration runs on every rank together: apply "
                        "the snippet in your training script")

    assert st.ref is not None
    out = OptimizeResult(
        workload=w.to_dict(), device=w.device, remedies=results, best=best,
        snippet=snippet_for(best), best_fn=best_fn,
        regime=None if report is None else report.regime,
        reference={"output_dtype": st.out_dtype, "eager_nondeterminism": st.nondet,
                   "output_nonfinite": None},
        notes=notes, optimize_s=time.perf_counter() - t0, diagnose_s=diagnose_s,
        budget_s=opts.budget_s)
    out.distributed = {
        "world_size": world.size, "backend": backend, "kind": kind,
        "facts": None if facts is None else {
            "step_s": facts.step_s, "exposed_communication_s": facts.exposed_s,
            "no_sync_bound_s": facts.no_sync_bound_s,
            "grad_bytes": facts.total_grad_bytes, "params": len(facts.grad_bytes),
            "mem_bw_bytes_per_s": facts.mem_bw_bytes_per_s,
            "busbw_source": facts.busbw_source, "bucket_cap_mb": facts.bucket_cap_mb},
    }
    return out
