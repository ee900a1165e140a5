"""`gobrrr optimize` under torchrun: the distributed remedies (remedies/ddp.py, fsdp.py)
applied to copies of the workload on every rank, verified and timed in lockstep; rank 0
writes the result in optimize's own format (remedies/result.py).

Every rank, in this order:
1. the distributed diagnosis (dist/diagnose.py; its own lockstep stages), unless
   --no-diagnose: rank 0's budget and the merged section give the predictions' facts;
2. the base: the target's factory again on every rank (a fresh DDP or FSDP2 build, its
   constructor collective), primed with one call (DDP);
3. the reference: two copies of the base, two calls each from the same RNG state; each
   gives its outputs and the update of every parameter over the first call (p1 - p0, in
   fp64 from the fp32 values: exact) and the gradients after it;
4. each candidate, in the order of the search plan (remedies/plan.py, through
   remedies/runner.search: predicted gain, catalog order) as rank 0 decides and
   broadcasts it, while its estimated cost fits before the deadline (rank 0's clock):
   a copy (DDP: a deep copy of the base whose DDP is re-wrapped around its `module` with
   the new settings, on the same process group, and every reference to the old wrapper in
   the copy swapped for the new one; FSDP2: a fresh build from the factory with the
   settings changed), 3 warm calls, the starting state restored in place, the reference's
   two calls, compared (outputs, parameter updates, gradients) on every rank, verified
   only when every rank passes; then interleaved A/B timing in lockstep;
5. the winners together (the plan's stack: one per group), when at least two won.
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

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from gobrrr.dist.ceilings import load_cached
from gobrrr.dist.context import comm_facts
from gobrrr.dist.diagnose import DistOptions, diagnose_distributed, target_fingerprint
from gobrrr.dist.lockstep import DistError, Lockstep, World, setup
from gobrrr.errors import WARNING, UserError, first_line
from gobrrr.remedies import catalog
from gobrrr.remedies.base import Candidate, Context, RemedyResult, RemedySpec
from gobrrr.remedies.ddp import find_ddps, rewrap
from gobrrr.remedies.evaluate import WARM_CALLS, out_dtype
from gobrrr.remedies.fsdp import apply_fsdp, find_fsdp
from gobrrr.remedies.plan import diagnose_budget
from gobrrr.remedies.result import OptimizeResult, snippet_for
from gobrrr.remedies.runner import search
from gobrrr.remedies.updates import RunOut, judge, nondeterminism, run_calls, update_error
from gobrrr.remedies.verify import ab_time
from gobrrr.state import (
    copy_workload,
    describe,
    plain_state,
    put_back,
    restore,
    snapshot,
)
from gobrrr.timing import time_call

__all__ = ["DistOptimizeOptions", "optimize_distributed", "RunOut", "judge",
           "update_error", "nondeterminism"]

Progress = Callable[[str], None]



@dataclass
class DistOptimizeOptions:
    budget_s: float = 120.0
    timeout_s: float = 60.0
    diagnose: bool = True
    ab_budget_s: float = 1.0
    only: list[str] | None = None
    # each call of `load` builds the workload anew (a factory target); False: it returns
    # the user's own objects (gobrrr.optimize in a torchrun script), which FSDP2's
    # remedies would change in place
    fresh_builds: bool = True


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


def _copy(st: _State, specs: Sequence[RemedySpec] = ()) -> Candidate:
    """A fresh copy of the workload with `specs` applied (none: as the user wrote it).
    DDP: a deep copy of the base, its wrapper rebuilt once around the copied module with
    the union of the specs' settings (the reference too, so both sides of every A/B are
    wrappers built the same way); FSDP2: a fresh build from the factory, its settings
    changed."""
    settings: dict[str, Any] = {}
    for spec in specs:
        settings.update(spec.settings or {})
    if st.kind == "ddp":
        c = copy_workload(st.base.fn, st.base.args, st.base.kwargs)
        cand, notes = rewrap(Candidate(c.fn, c.args, c.kwargs, c.modules, c.optimizers,
                                       c.tensors), settings)
        cand.notes = notes
        return cand
    w = st.load()
    c = describe(w.fn, w.args, w.kwargs)
    cand = Candidate(c.fn, c.args, c.kwargs, c.modules, c.optimizers, c.tensors)
    cand.notes = apply_fsdp(c.modules, settings) if settings else []
    return cand


def _evaluate(st: _State, specs: list[RemedySpec], ab_budget_s: float,
              deadline: float) -> RemedyResult:
    """One candidate on every rank in lockstep (module docstring, step 4); every stage
    ends in an exchange of statuses (`_attempt`)."""
    ls, name = st.ls, "+".join(s.name for s in specs)
    precision = next((s.precision for s in specs if s.precision), None)
    res = RemedyResult(name, "+".join(dict.fromkeys(s.regime for s in specs)), "failed", "",
                       components=tuple(s.name for s in specs),
                       snippet="\n".join(s.snippet for s in specs))
    cand, why = _attempt(ls, f"applying {name}", lambda: _copy(st, specs))
    if why:
        res.reason = f"applying: {why}"
        return res
    res.checks["notes"] = cand.notes

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
    out, why = _attempt(ls, f"verifying {name}", lambda: run_calls(cand, st.device))
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
    ls = st.ls
    say("reference: eager, twice from the same state, on every rank")
    ref_work = ls.stage("copying the reference", lambda: _copy(st))
    st.ref = ls.stage("running the reference", lambda: run_calls(ref_work, st.device))
    twin = ls.stage("copying the reference again", lambda: _copy(st))
    again = ls.stage("running the reference again", lambda: run_calls(twin, st.device))
    st.ref_work = ref_work
    st.out_dtype = out_dtype(st.ref.outputs)
    st.nondet = nondeterminism(st.ref, again)
    st.call_s = max(ls.all_gather(ls.stage("timing one call", lambda: time_call(
        lambda: twin.fn(*twin.args, **twin.kwargs), st.device)), "sharing call times"))


def optimize_distributed(world: World, target: str | None, device: str,
                         load: Callable[[], Any], opts: DistOptimizeOptions,
                         progress: Progress | None = None) -> Any:
    """Every rank: the steps of the module docstring. Returns the OptimizeResult on rank
    0 and None elsewhere; raises DistError (every rank) when a rank fails outside a
    candidate."""
    say = progress or (lambda _m: None)
    t0 = time.perf_counter()
    deadline = t0 + opts.budget_s  # rank 0's clock decides (broadcast)
    # before any work, on every rank alike: an unknown name is one line
    wanted = catalog.select(opts.only, pool=catalog.DISTRIBUTED, what="distributed remedy")
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
    base = describe(w.fn, w.args, w.kwargs)
    kind = "ddp" if find_ddps(base.modules) else "fsdp" if find_fsdp(base.modules) else None
    kinds = ls.all_gather(kind, "agreeing on DDP or FSDP2")
    if len(set(kinds)) > 1 or kind is None:
        raise DistError("no DistributedDataParallel or FSDP2 (fully_shard) module reachable "
                        f"from the workload on every rank (found {kinds}): the distributed "
                        "remedies change one of those")
    notes: list[str] = []
    if kind == "fsdp" and not opts.fresh_builds:
        raise UserError("FSDP2's remedies need a fresh build of the model for every "
                        "candidate (FSDP2 modules cannot be copied): run gobrrr optimize "
                        "with a factory target, FILE.py:NAME(batch_size)")
    if kind == "ddp":
        ls.stage("priming the base", lambda: w.run("priming the base"))
    else:
        notes.append("FSDP2: every copy is a fresh build from the factory (FSDP2 modules "
                     "cannot be deep-copied); verification assumes the factory builds the "
                     "same weights each call (seed it)")
    # The predictions read rank 0's merged diagnosis, as the doctor report's did; the
    # search broadcasts them (remedies/runner.search)
    comm = None
    if world.rank == 0 and report is not None:
        comm = comm_facts(base.modules, report.distributed, world.size, load_cached())
    if report is None:
        notes.append("no diagnosis (--no-diagnose): no predictions")
    ctx = Context.from_report(device, report, report.counts.records if report else [],
                              comm=comm)
    specs = [s for s in wanted if s.family == kind]
    st = _State(ls, device, kind, base, load)
    _build(st, say)
    results, _cand, best = search(
        specs, ctx, lambda combo: (_evaluate(st, combo, opts.ab_budget_s, deadline), None),
        call_s=st.call_s, ab_budget_s=opts.ab_budget_s, deadline=deadline, say=say,
        notes=notes, coordinator=ls)
    if world.rank != 0:
        return None
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
        "facts": None if comm is None or report is None else {
            "step_s": report.budget.total_s,
            "exposed_communication_s": report.budget.communication_s or 0.0,
            "no_sync_bound_s": comm.no_sync_bound_s,
            "grad_bytes": comm.total_grad_bytes, "params": len(comm.grad_bytes),
            "mem_bw_bytes_per_s": getattr(report.ceilings, "bandwidth_bytes_per_s", None),
            "busbw_source": comm.busbw_source, "bucket_cap_mb": comm.bucket_cap_mb},
    }
    return out
