"""The search of `gobrrr optimize` (gobrrr.api diagnoses first): the applicable remedies
and their combinations in the order plan.py gives (cheap probes, then the winners
together, under the default compile, under the costlier compiles), each started only
when its estimated cost fits before the deadline; the best verified configuration,
predicted vs measured for each, what was skipped and why, and the code to apply the
winner.

The user's objects are never run by a remedy: the base is rebuilt from the workload's
factory when it has one (a fresh, independent instance) or deep-copied from it
(gobrrr.state), primed with one eager call (lazy optimizer state, gradients), and every
candidate and the reference are copies of that base. The whole run also sits inside
state.preserved_state, which restores everything of the user's the workload reaches.
"""

from __future__ import annotations

import contextlib
import signal
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from gobrrr.coordinator import SOLO, Coordinator
from gobrrr.counting import count
from gobrrr.errors import WARNING
from gobrrr.gains import Gain, combine, predicted_loss
from gobrrr.phases import working_ops
from gobrrr.remedies import catalog, compile_record, verify
from gobrrr.remedies.base import (
    PREP_COMPILE,
    Candidate,
    Context,
    RemedyResult,
    RemedySpec,
    switches_on,
    workload_facts,
)
from gobrrr.remedies.compile_child import (
    BACKGROUND_NICE,
    CHILD_ANSWER_S,
    RECOMPILE_FACTOR,
    START_S,
    ChildCompile,
    ChildRun,
    background_cores,
    prestart_child,
    start_child,
)
from gobrrr.remedies.evaluate import Reference, evaluate, make_reference, time_ab
from gobrrr.remedies.plan import (
    ASIDE_BASIS,
    MODE_FACTOR,
    TIER_NAMES,
    Entry,
    MeasuredCompile,
    Option,
    Outcome,
    Plan,
    SearchState,
    Skip,
    background_compile,
    compile_factor,
    option_for,
    options,
    plan,
)
from gobrrr.remedies.quiet import (
    NotTimedAgain,
    QuietCheck,
    Retime,
    captured_before_compile,
    holds_runner_up,
    room_for_another,
)
from gobrrr.remedies.result import NONFINITE_REFERENCE, OptimizeResult
from gobrrr.remedies.run_notes import eager_drift, faster_unheld
from gobrrr.remedies.verify import ABResult
from gobrrr.settings import tf32_enabled
from gobrrr.state import (
    Copied,
    copy_workload,
    describe,
    preserved_state,
    stateful_ids,
    walk,
)
from gobrrr.workload import Workload

__all__ = ["search_workload", "search", "best_callable", "INTERRUPTED", "base_copy", "prime",
           "prestart", "context_of", "wants_child"]

# The reason of every candidate a Ctrl-C left unmeasured (and the note that says it).
INTERRUPTED = "interrupted (Ctrl-C)"
# Seconds past the deadline, beside two A/B budgets, that capturing a graph again may
# take where the search ended (quiet.captured_before_compile): the apply, the copy and
# the capture's warm-up calls
RECAPTURE_GRACE_S = 5.0
# The share of --budget-s past its deadline that the compile probe with the largest
# predicted gain may run to in its measuring child (its compile waited on, then verified
# and timed there): the run's documented bound is about 1.15 x --budget-s + 10 s
# (docs/optimize.md). On an H100 (session ad) the GPT-2 training step's child began
# compiling the hand search's best stack 15.9 s after it spawned and was stopped
# unfinished at 57.2 s of the 60, where that stack measured 4.75x against the 2.99x the
# search ended with.
PROBE_OVERRUN = 0.15

Progress = Callable[[str], None]


def base_copy(w: Workload, notes: list[str]) -> tuple[Copied, bool]:
    """(primed base, independent of the user's objects)."""
    if w.factory is not None and w.batch_size is not None:
        fresh = w.scaled(1)  # the factory again: a new, independent instance
        base = describe(fresh.fn, fresh.args, fresh.kwargs)
    else:
        base = copy_workload(w.fn, w.args, w.kwargs)
    shared = stateful_ids(w.fn, w.args, w.kwargs) & stateful_ids(base.fn, base.args,
                                                                 base.kwargs)
    if shared:
        notes.append(f"{len(shared)} object(s) of the workload could not be copied (state "
                     "reachable only indirectly): remedies that change modules or "
                     "optimizers are skipped")
    return base, not shared


def prime(base: Copied, w: Workload) -> list[bool]:
    """One eager call of the base (creates lazy optimizer state and gradients), with a
    spy on optimizer.zero_grad to learn how the step calls it."""
    calls: list[bool] = []
    for o in base.optimizers:
        bound = o.zero_grad

        def spy(set_to_none: bool = True, _bound: Any = bound) -> None:
            calls.append(set_to_none)
            _bound(set_to_none=set_to_none)

        o.zero_grad = spy
    try:
        Workload(w.name, base.fn, base.args, base.kwargs, w.device).run("priming a copy")
    finally:
        for o in base.optimizers:
            del o.zero_grad  # the class's method again: copies must not carry the spy
    return calls


def search_workload(w: Workload, *, deadline: float, report: Any = None,
                    only: list[str] | None = None, ab_budget_s: float = verify.AB_BUDGET_S,
                    compile_backend: str = "inductor",
                    extra_specs: list[RemedySpec] | None = None,
                    progress: Progress | None = None,
                    prestarted: ChildRun | None = None,
                    overrun_s: float = 0.0) -> OptimizeResult:
    """Predict, apply, verify and rank the remedies for `w` until `deadline` (a
    time.perf_counter() value), in the order plan.py gives. `report`: the diagnosis
    (gobrrr.api runs it first); None: no predictions. `prestarted`: a compile child
    started before the diagnosis (`prestart`), stopped here when done. `overrun_s`: how
    far past the deadline the largest-gain compile probe may run in its measuring child
    (PROBE_OVERRUN)."""
    import torch

    say = progress or (lambda _m: None)
    t_start = time.perf_counter()
    specs = catalog.select(only) + list(extra_specs or [])
    notes: list[str] = []
    with preserved_state(w) as state:
        base, independent = base_copy(w, notes)
        zero_calls = prime(base, w)
        ctx = context_of(w, report, base, independent, zero_calls, compile_backend)
        if ctx.reference_precision:
            notes.append("eager already runs fp32 matmuls/convolutions in TF32 here "
                         "(torch.backends flags): outputs are compared at TF32 tolerance")
        say("reference: eager, twice from the same state")
        ref = make_reference(base, w.device)
        if ref.nonfinite:
            say(f"{WARNING}{NONFINITE_REFERENCE}: {ref.nonfinite}")
        child = _child_probe(w, ab_budget_s, prestarted)
        try:
            results, best_cand, best_res, compiled_here = _search(
                specs, base, ref, ctx, ab_budget_s, deadline, say, notes, child, overrun_s)
        finally:
            if child is not None:
                child.close()
        # only where this process compiled: a row measured in its compile child (or
        # skipped after compiling there) left nothing here to drop, and the reset's cold
        # import of dynamo and Inductor alone took 1-3 s past the deadline (issue 24)
        if compiled_here:
            torch._dynamo.reset()  # drop gobrrr's variants (their memory, their guards)
            notes.append("torch.compile's caches were reset (torch._dynamo.reset()) to "
                         "compile each variant from a clean state: functions you had "
                         "compiled before compile again on their next call")
    if best_res is not None and best_res.checks.get("measured_in_child"):
        here = [r for r in results if r.status == "verified" and r.measured_speedup
                and not r.checks.get("measured_in_child")]
        live = max(here, key=lambda r: r.measured_speedup or 0.0).name if here else None
        notes.append(f"{best_res.name} was verified and timed in the child process that "
                     "compiled it (its compile not paid twice): the optimized callable "
                     "this result holds runs " + (f"the best measured here ({live})"
                                                  if live else "the eager workload"))
    notes = [f"{WARNING}{line}" for line in state.warnings] + notes
    return OptimizeResult.build(w, report, results, best_res, best_callable(best_cand, ref),
                                ref, notes, time.perf_counter() - t_start)


def context_of(w: Workload, report: Any, base: Copied, independent: bool,
             zero_calls: list[bool], compile_backend: str) -> Context:
    """What the remedies read. The counted ops are the diagnosis's (counted on the
    user's objects, so theirs are the parameters freezing would fold), else a count of
    the base copy's call."""
    if report is not None:
        records = report.counts.records
        reach = walk(w.fn, w.args, w.kwargs)
        storages = workload_facts(reach.modules, [])["param_storages"]
    else:

        # the user's exception as a WorkloadError: their traceback, exit 2
        records = count(Workload(w.name, base.fn, base.args, base.kwargs,
                                 w.device).run, "counting a copy").records
        storages = workload_facts(base.modules, [])["param_storages"]
    facts = workload_facts(base.modules, base.optimizers) | {"param_storages": storages}
    ctx = Context.from_report(w.device, report, records, zero_grad_set_to_none=zero_calls,
                              independent_copy=independent,
                              compile_backend=compile_backend, **facts)
    ctx.reference_precision = _reference_precision(ctx)
    return ctx


def _reference_precision(ctx: Context) -> str | None:

    if ctx.device != "cuda":
        return None
    fp32 = [r for r in ctx.records if r.dtype == "fp32"]
    convs = any(r.op_class == "conv" for r in fp32)
    mms = any(r.op_class == "matmul" for r in fp32)
    if (convs and tf32_enabled("conv")) or (mms and tf32_enabled("matmul")):
        return "tf32"
    return None


def _entries(specs: list[RemedySpec], ctx: Context
             ) -> tuple[list[Entry], dict[str, Gain], list[RemedyResult]]:
    """The remedies the search may run, with their predicted gains, and the rows of the
    others (not applicable, advice)."""
    entries: list[Entry] = []
    gains: dict[str, Gain] = {}
    results: list[RemedyResult] = []
    for rank, spec in enumerate(specs):
        gain = spec.predict(ctx)
        gains[spec.name] = gain
        row = RemedyResult(spec.name, spec.regime, "not applicable", "", gain.speedup,
                           gain.basis, components=(spec.name,),
                           snippet=spec.snippet_in(ctx))
        why_not = spec.applies(ctx)
        if why_not:
            row.reason = why_not
            results.append(row)
        elif spec.advice_only:
            row.status, row.reason = "advice", gain.basis
            results.append(row)
        else:
            entries.append(Entry(spec.name, spec.group, spec.prep, spec.stage, gain, rank,
                                 spec.compile_mode, spec.keep_when_neutral, spec.excludes))
    return entries, gains, results


def _basis(ctx: Context, names: tuple[str, ...], gains: dict[str, Gain],
           by_name: dict[str, RemedySpec]) -> str:
    """The basis of an option's prediction: the remedy's own, or the combination's."""
    if len(names) == 1:
        return gains[names[0]].basis
    if ctx.budget is None:
        return "no diagnose budget"
    return combine(ctx.budget, [gains[n] for n in names], names,
                   compiled=any(by_name[n].prep == PREP_COMPILE for n in names)).basis


def _row(name: str, components: tuple[str, ...], by_name: dict[str, RemedySpec],
         status: str, reason: str, ctx: Context) -> RemedyResult:
    parts = sorted((by_name[n] for n in components), key=lambda s: s.stage)
    return RemedyResult(name, "+".join(dict.fromkeys(s.regime for s in parts)), status,
                        reason, components=components,
                        snippet="\n".join(s.snippet_in(ctx) for s in parts))


ChildProbe = Callable[[list[RemedySpec], float], ChildCompile]


class ChildProber:
    """The compile probes' children (compile_child.py) of one search: `start` begins the
    first probe's compile in the background where the machine has cores to spare (a
    CUDA workload: a CPU one's timed calls need every core), and the probe's turn
    (`__call__`) then waits on it; any other probe starts its own child and waits.
    `stopped_after_s`: the longest a child ran unfinished before it was stopped (a cold
    compile of this workload takes longer: a later child given less is not started)."""

    def __init__(self, reload: dict[str, Any], cores: list[int] | None,
                 measure_ab_s: float | None = None,
                 prestarted: ChildRun | None = None) -> None:
        self.reload = reload
        self.cores = cores
        # its children can verify and time their candidate themselves (ChildRun.measure)
        self.measure_ab_s = measure_ab_s
        self.background: ChildRun | None = None
        self.waited_on = False
        self.stopped_after_s: float | None = None
        # built while the diagnosis ran (prestart), waiting for its remedies: the first
        # child the search needs
        self.prestarted = prestarted

    def _child(self, names: list[str], cores: list[int] | None) -> ChildRun:
        if self.prestarted is not None:
            run, self.prestarted = self.prestarted, None
            run.begin(names)
            return run
        return start_child(self.reload, names, cores, self.measure_ab_s)

    def start(self, combo: list[RemedySpec]) -> str | None:
        """Start `combo`'s compile in the background; what to say, or None (not
        started: no cores to spare, or one already was)."""
        if self.cores is None or self.background is not None:
            return None
        early = self.prestarted is not None
        self.background = self._child([s.name for s in combo], self.cores)
        span = f"{self.cores[0]}-{self.cores[-1]}" if len(self.cores) > 1 else self.cores[0]
        guess = self.background.speculating
        tail = ""
        if guess:
            tail = ("; the child began it before the diagnosis, a guess (a training step's "
                    "usual best stack, remedies/speculation.py), and ran the step meanwhile "
                    "to count it: the diagnosis's timings shared the device with those "
                    "calls")
        elif early:
            tail = "; the child had built the workload while the diagnosis ran"
        return (f"{'+'.join(guess or [s.name for s in combo])} compiled in a child process "
                f"in the background (cores {span}, nice {BACKGROUND_NICE}) while the other "
                "candidates were measured: their timings shared the machine with it" + tail)

    def compiled_aside(self) -> tuple[str, ...] | None:
        """The background child's combination where its compile has ended and it waits
        to be measured, no probe having waited on it (plan.SearchState.compiled_aside:
        it costs the search its measuring only); None otherwise."""
        if self.background is None or self.waited_on:
            return None
        return self.background.waits_compiled()

    def holds(self, names: Sequence[str]) -> bool:
        """Whether the background child, no probe having waited on it, has compiled
        (`compiled_aside`) or is compiling the combination `names`: that option's turn
        waits on the child rather than compiling the same graph here, and the compile it
        records is the child's cold one. On an H100 (session am) GPT-2 8x512's first
        compile here, the child's combination once the child had compiled it, took 5.3 s
        from the child's caches, and the machine's record kept it as a 219-op compile: the
        next row's cold compile of that size, estimated from it at 5.3 s, took 12.2 s.
        One still compiling is waited on too (not seen; two compiles of one graph at once
        would share the host and its caches)."""
        if self.background is None or self.waited_on:
            return False
        run = self.background
        have = run.waits_compiled()
        if have is None and run.compiling():
            have = run.speculating or run.remedies
        return have is not None and set(have) == set(names)

    def compiling(self) -> bool:
        """Whether the background child compiles now (quiet.py)."""
        return self.background is not None and self.background.compiling()

    @property
    def speculating(self) -> tuple[str, ...]:
        """What the background child compiles on its own guess (speculation.py)."""
        return self.background.speculating if self.background is not None else ()

    def __call__(self, combo: list[RemedySpec], timeout_s: float) -> ChildCompile:
        if self.background is not None and not self.waited_on:
            self.waited_on = True
            run = self.background
        else:
            run = self._child([s.name for s in combo], None)
        got = run.wait(timeout_s)
        if got.timed_out:
            self.stopped_after_s = max(self.stopped_after_s or 0.0, got.waited_s)
        return got

    def close(self) -> None:
        for run in (self.background, self.prestarted):
            if run is not None:
                run.stop()


def _child_probe(w: Workload, ab_budget_s: float,
                 prestarted: ChildRun | None = None) -> ChildProber | None:
    """The compile probes' children (ChildProber), where the workload can be built again
    in a child (a CLI target); None for a callable. `prestarted`: the child `prestart`
    started, its first."""
    reload = w.reload
    if reload is None:
        return None
    return ChildProber(reload, background_cores() if w.device == "cuda" else None,
                       ab_budget_s, prestarted)


def wants_child(device: str, only: list[str] | None,
                extra_specs: list[RemedySpec] | None = None) -> bool:
    """Whether the search starts a background compile child (compile_child.py): on CUDA
    with cores to spare, where a remedy that compiles is selected."""
    if device != "cuda" or background_cores() is None:
        return False
    specs = catalog.select(only) + list(extra_specs or [])
    return any(s.prep == PREP_COMPILE for s in specs)


def prestart(reload: dict[str, Any] | None, device: str, only: list[str] | None,
             ab_budget_s: float, extra_specs: list[RemedySpec] | None = None
             ) -> ChildRun | None:
    """The background child started before the diagnosis (compile_child.py), where the
    search would start one (`wants_child`, a CLI target: `reload`); None elsewhere. A
    training step's child compiles speculation.py's guess at once (not for a script's
    extra remedies, which a child could not apply). The caller stops it. The CLI starts
    its own before it imports torch (compile_child.early_child)."""
    if reload is None or not wants_child(device, only, extra_specs):
        return None
    return prestart_child(reload, background_cores(), ab_budget_s,
                          speculate=not extra_specs, only=only)


def _search(specs: list[RemedySpec], base: Copied, ref: Reference, ctx: Context,
            ab_budget_s: float, deadline: float, say: Progress,
            notes: list[str], child: ChildProbe | None = None, overrun_s: float = 0.0
            ) -> tuple[list[RemedyResult], Candidate | None, RemedyResult | None, bool]:
    """One process's search: each candidate through evaluate.py; and whether this
    process evaluated a candidate that compiles (a compile child's are not)."""
    compiled: list[bool] = []
    compiles_before: dict[int, int] = {}  # id(live candidate) -> compiles here before it

    def run_one(combo: list[RemedySpec], by: float = deadline
                ) -> tuple[RemedyResult, Candidate | None]:
        before = sum(compiled)
        compiled.append(any(s.prep == PREP_COMPILE for s in combo))
        got, cand = evaluate(combo, base, ref, ctx, ab_budget_s, by)
        if cand is not None:
            compiles_before[id(cand)] = before
        return got, cand

    def retime(row: RemedyResult, cand: Candidate) -> tuple[ABResult, Candidate | None]:
        if not captured_before_compile(cand, sum(compiled), compiles_before.get(id(cand))):
            return time_ab(cand, ref, ctx.device, ab_budget_s, deadline), cand
        # a compile ran here since its capture: captured again (quiet.py), where the
        # search ended, past the deadline by what one capture and A/B timing take
        by_name = {s.name: s for s in specs}
        by = max(deadline, time.perf_counter() + RECAPTURE_GRACE_S + 2 * ab_budget_s)
        got, fresh = run_one([by_name[n] for n in row.components], by)
        if got.measured_speedup is None or got.interval is None:
            raise NotTimedAgain(f"captured again after this process compiled, it "
                                f"{got.status}: {got.reason}")
        return ABResult(got.measured_speedup, got.interval, got.eager_s or 0.0,
                        got.candidate_s or 0.0, got.checks.get("ab_rounds", 0),
                        got.checks.get("calls_per_block", 0)), fresh

    def stale(cand: Candidate) -> bool:
        return captured_before_compile(cand, sum(compiled), compiles_before.get(id(cand)))

    results, best_cand, best_res = search(
        specs, ctx, run_one, call_s=ref.call_s, ab_budget_s=ab_budget_s, deadline=deadline,
        say=say, notes=notes, child=child, retime=retime, stale=stale, overrun_s=overrun_s)
    return results, best_cand, best_res, any(compiled)


def search(specs: list[RemedySpec], ctx: Context,
           run_one: Callable[[list[RemedySpec]], tuple[RemedyResult, Candidate | None]], *,
           call_s: float, ab_budget_s: float, deadline: float, say: Progress,
           notes: list[str], coordinator: Coordinator = SOLO,
           child: ChildProbe | None = None,
           retime: Retime | None = None,
           stale: Callable[[Candidate], bool] | None = None,
           overrun_s: float = 0.0
           ) -> tuple[list[RemedyResult], Candidate | None, RemedyResult | None]:
    """Plan (plan.py), run the first option (`run_one`), plan again with what it
    measured, until nothing fits; what never ran is "skipped" with the plan's reason.
    `child`: the compile probe in a child process (compile_child.py), for a compile the
    plan runs as a probe (its time a prior guess that does not fit).
    Under torchrun (dist/optimize.py) every decision is rank 0's (`coordinator`): the
    remedies and their predictions (only rank 0 has the merged diagnosis), and each next
    candidate, so every rank runs the same candidate at the same time.
    `retime`: a live candidate's A/B timing, for the best row timed while the background
    compile ran, timed again once it has ended (quiet.py). `stale`: whether a live
    candidate holds a CUDA graph captured before a compile ran in this process: the
    result's is captured again at the end (QuietCheck.recapture). `overrun_s`: how far
    past the deadline the largest-gain compile probe may run in its measuring child
    (PROBE_OVERRUN)."""
    coord = coordinator
    results: list[RemedyResult] = []
    best_cand: Candidate | None = None
    best_res: RemedyResult | None = None
    live_s = 0.0  # best_cand's speedup
    by_name = {s.name: s for s in specs}
    entries, gains, rows = coord.decide(_entries(specs, ctx) if coord.rank == 0 else None,
                                        "agreeing on the remedies and their predictions")
    results += rows
    state = SearchState(entries, ctx.device, working_ops(ctx.records), call_s, ab_budget_s,
                        ctx.budget)
    state.recorded_compile = compile_record.nearest(ctx.device, state.n_ops)
    ran = 0
    quiet = QuietCheck(lambda: isinstance(child, ChildProber) and child.compiling(), retime)
    live_res: RemedyResult | None = None  # best_cand's row
    # the runner-up's row and candidate, held while the best waits to be timed again
    runner: tuple[RemedyResult, Candidate] | None = None

    def settle() -> None:
        """The best live row timed again, where it was timed beside the background
        compile and that has ended (quiet.py): before each plan, and before this process
        compiles, so that a graph captured before is replayed in the state it was
        measured in (the one captured again otherwise: quiet.captured_before_compile).
        The runner-up held beside it is timed again where the best fell below it."""
        nonlocal best_res, best_cand, live_s, live_res, runner
        if not quiet.settle(live_res, best_cand, deadline, say):
            return
        assert live_res is not None
        held, runner = runner, None
        row, live = live_res, quiet.live
        if held is not None:
            took = quiet.settle_runner_up(live_res, held[0], held[1], deadline, say)
            if took is not None:
                row, live = held[0], took
        best_res, best_cand, live_s = _after_settling(
            results, row, live, state, [live_res] + ([held[0]] if held else []))
        live_res = row

    with _ctrl_c_recorded() as ctrl_c:
        while True:
            try:
                settle()
                state.compiled_aside = (child.compiled_aside()
                                        if isinstance(child, ChildProber) else None)
                now = plan(options(state), deadline - time.perf_counter(),
                           probe_overrun_s=_probe_overrun_s(child, overrun_s))
                if ran == 0 and isinstance(child, ChildProber) and coord is SOLO:
                    _start_background(now, state, child, by_name, say, notes)
                opt = coord.decide(now.order[0] if now.order else None, "the next candidate")
                if opt is None:
                    break
                compiling = quiet.before()
                got, cand = _run_option(opt, by_name, run_one, ctx, gains, state, results,
                                        say, child, deadline, before_compile=settle,
                                        overrun_s=overrun_s)
                quiet.after(got, compiling)
                ran += 1
                if ctrl_c:
                    # a Ctrl-C some library swallowed while this candidate ran (dynamo's
                    # tracing did): its failure is the interrupt's
                    if got.status == "failed":
                        got.status, got.reason, ran = "skipped", INTERRUPTED, ran - 1
                    raise KeyboardInterrupt
                # a row measured in its compile child has no live candidate here: it
                # can be the best row; the callable is the best live one
                speed = got.measured_speedup or 0.0
                if got.status == "verified" and (
                        cand is not None or got.checks.get("measured_in_child")) and (
                        best_res is None or speed > (best_res.measured_speedup or 0)):
                    best_res = got
                if cand is not None and got.status == "verified":
                    pair = (got, cand)
                    if speed > live_s:
                        if best_cand is not None and live_res is not None:
                            pair = (live_res, best_cand)  # the best until now
                        best_cand, live_s, live_res = cand, speed, got
                    runner = _runner_up(live_res, runner, pair, ctx.device)
            except KeyboardInterrupt:
                # Ctrl-C, wherever it lands: what was measured is kept and shown; the
                # candidate it stopped and what never ran are skipped
                notes.append(f"{INTERRUPTED}: {ran} candidate(s) measured, the rest not "
                             "run")
                say(f"interrupted: {ran} candidate(s) measured; the rest are skipped")
                now = Plan((), tuple(Skip(o.name, INTERRUPTED) for o in options(state)))
                break
    settle()
    if (stale is not None and retime is not None and best_cand is not None
            and live_res is not None and stale(best_cand)):
        fresh = quiet.recapture(live_res, best_cand, say)
        best_res, best_cand, live_s = _after_settling(results, live_res, fresh, state,
                                                      [live_res])
    notes += quiet.notes()
    diagnosed_s = None if ctx.budget is None else ctx.budget.total_s
    for note in (faster_unheld(results, best_res),
                 eager_drift(results, diagnosed_s, best_res)):
        if note is not None:
            say(note)
            notes.append(note)
    remaining = {o.name: o for o in options(state)}
    for skip in now.skipped:
        found = remaining[skip.name]
        row = _row(skip.name, found.components, by_name, "skipped", skip.reason,
                   ctx)
        row.checks["plan"] = {"tier": TIER_NAMES[found.tier], "estimated_prep_s":
                              found.prep_s, "estimated_s": found.cost_s,
                              "prep_basis": found.prep_basis, "probe": False}
        row.predicted_speedup = found.predicted
        row.prediction_basis = _basis(ctx, found.components, gains, by_name)
        results.append(row)
    if now.skipped:
        say(f"{len(now.skipped)} candidate(s) skipped (the table says why)")
        notes.append(f"search: {ran} candidate(s) run, {len(now.skipped)} skipped for "
                     "time or worth (docs/optimize.md: the search)")
    return results, best_cand, best_res


def _runner_up(best: RemedyResult | None, held: tuple[RemedyResult, Candidate] | None,
               new: tuple[RemedyResult, Candidate], device: str
               ) -> tuple[RemedyResult, Candidate] | None:
    """The row and candidate the search holds beside the best while the best waits to be
    timed again (quiet.holds_runner_up): the faster of the one held and `new`, a new one
    only where the device has room for it (quiet.room_for_another)."""
    fits = [p for p in (held, new) if p is not None and holds_runner_up(best, p[0])]
    if not fits:
        return None
    top = max(fits, key=lambda p: p[0].measured_speedup or 0.0)
    if top is held or room_for_another(device):
        return top
    return held if held in fits else None


def _after_settling(results: list[RemedyResult], live_res: RemedyResult | None,
                    live: Candidate | None, state: SearchState,
                    retimed: list[RemedyResult]
                    ) -> tuple[RemedyResult | None, Candidate | None, float]:
    """(best row, live candidate, its speedup) once the live best row (and the runner-up
    held beside it) was timed again (quiet.py): `live_res` is the one that stays live,
    where it is still verified; the best row is the fastest verified one that is live or
    was measured in a compile child (the rows the search can hold). The plan's record of
    each row timed again takes the new figure: the stacks built on it are predicted from
    the quiet one."""
    for row in retimed:
        if row.name in state.done:
            state.done[row.name] = Outcome(row.status, row.measured_speedup,
                                           state.done[row.name].prep_s)
    kept = live_res is not None and live_res.status == "verified" and live is not None
    holdable = [r for r in results if r.status == "verified" and r.measured_speedup
                and (r is live_res or r.checks.get("measured_in_child"))]
    best = max(holdable, key=lambda r: r.measured_speedup or 0.0) if holdable else None
    if not kept:
        return best, None, 0.0
    assert live_res is not None
    return best, live, live_res.measured_speedup or 0.0


def _start_background(now: Plan, state: SearchState, child: ChildProber,
                      by_name: dict[str, RemedySpec], say: Progress,
                      notes: list[str]) -> None:
    """The compile the search will most likely probe first (plan.background_compile: the
    predicted stack's; else the first plan's compile probe), compiled in the background
    (ChildProber) while the candidates before it are measured."""
    guess = background_compile(state)
    first = guess if guess is not None else next((o for o in now.order if o.probe and any(
        by_name[n].prep == PREP_COMPILE for n in o.components)), None)
    if first is None:
        return
    note = child.start([by_name[n] for n in first.components])
    if note is not None:
        ahead = child.speculating
        if ahead and set(ahead) != set(first.components):
            say(f"the child started before the diagnosis compiles {'+'.join(ahead)} (its "
                f"guess); the plan's first compile, {first.name}, will use it where its "
                "own no longer fits")
        else:
            say(f"compiling {first.name} in a child process in the background, while the "
                "candidates before it are measured"
                + (" (begun before the diagnosis: the guess it made)" if ahead else ""))
        notes.append(note)


@contextlib.contextmanager
def _ctrl_c_recorded() -> Iterator[list[bool]]:
    """A list that holds True once SIGINT arrived, the KeyboardInterrupt raised as
    before: a library that catches it (dynamo wraps what its tracing raises) cannot
    make the search forget it. Outside the main thread, or where SIGINT is ignored:
    never set (no handler)."""
    seen: list[bool] = []
    before = (signal.getsignal(signal.SIGINT)
              if threading.current_thread() is threading.main_thread() else signal.SIG_IGN)
    if before in (signal.SIG_IGN, None):
        yield seen
        return

    def on_sigint(signum: int, frame: Any) -> None:
        seen.append(True)
        if callable(before):
            before(signum, frame)
        raise KeyboardInterrupt

    signal.signal(signal.SIGINT, on_sigint)
    try:
        yield seen
    finally:
        signal.signal(signal.SIGINT, before)


def _run_option(opt: Option, by_name: dict[str, RemedySpec],
                run_one: Callable[[list[RemedySpec]], tuple[RemedyResult, Candidate | None]],
                ctx: Context, gains: dict[str, Gain], state: SearchState,
                results: list[RemedyResult], say: Progress,
                child: ChildProbe | None = None, deadline: float = float("inf"),
                before_compile: Callable[[], None] | None = None,
                overrun_s: float = 0.0
                ) -> tuple[RemedyResult, Candidate | None]:
    """One candidate of the search: its row appended to `results` and its outcome to
    `state` as soon as it is measured (a Ctrl-C a moment later keeps it); (the row, the
    live candidate when verified faster). A compile probe first compiles in `child`
    where there is one (compile_child.py). `before_compile`: called before this process
    compiles the candidate (the search's quiet re-timing). `overrun_s`: how far past
    the deadline the probe may run in a measuring child (PROBE_OVERRUN)."""
    combo = [by_name[n] for n in opt.components]
    pred = f"predicted {opt.predicted:.2f}x, " if opt.predicted else ""
    probe = (" as a probe: the largest predicted gain, its estimate a guess before any "
             "compile" if opt.probe else "")
    say(f"{'remedy' if len(combo) == 1 else 'combination'} {opt.name} "
        f"({TIER_NAMES[opt.tier]}: {pred}~{opt.cost_s:.1f} s){probe}: apply to a copy, "
        "verify, time A/B")
    compiles = any(s.prep == PREP_COMPILE for s in combo)
    cold_s: float | None = None
    # the probe's compile goes to a child; so does the combination the background child
    # compiles or holds compiled (ChildProber.holds), whatever the plan's tier for it,
    # keeping to the deadline: only the largest-gain probe may run past it
    aside = isinstance(child, ChildProber) and child.holds(opt.components)
    if not opt.probe:
        overrun_s = 0.0
    if (opt.probe or aside) and compiles and child is not None:
        pre = _compile_first_in_child(opt, combo, child, deadline, say, by_name, overrun_s)
        if isinstance(pre, RemedyResult):
            return _record(opt, pre, ctx, gains, state, results, by_name, say=say), None
        if isinstance(pre, Instead):
            if set(pre.remedies) != set(opt.components):
                # the probe stays an option: the next plan estimates it from this compile
                opt = option_for(state, pre.remedies)
                combo = [by_name[n] for n in opt.components]
                where = ("measured there" if pre.run is not None
                         else "again here from its caches")
                say(f"combination {opt.name} (predicted {opt.predicted or 0:.2f}x) "
                    f"instead: compiled in the background child, {where}")
            cold_s = pre.compile_s
            if pre.run is not None:
                regime = "+".join(dict.fromkeys(s.regime for s in combo))
                row = _measured_in_child(opt, pre, deadline + overrun_s, regime)
                return _record(opt, row, ctx, gains, state, results, by_name, cold_s,
                               say), None
        else:
            cold_s = pre
    if compiles and before_compile is not None:
        before_compile()
    got, cand = run_one(combo)
    if cold_s is not None:
        got.checks["child_compile_s"] = cold_s
    return _record(opt, got, ctx, gains, state, results, by_name, cold_s, say), cand


def _probe_overrun_s(child: ChildProbe | None, overrun_s: float) -> float:
    """How far past the deadline the plan may let the largest-gain probe run: the
    overrun where its child measures it (`measure_ab_s`), none where the compile would
    be paid again in this process (that cannot be stopped)."""
    return overrun_s if getattr(child, "measure_ab_s", None) is not None else 0.0


@dataclass(frozen=True)
class Instead:
    """Run the child's combination (the probe's own, or the background's) without the
    probe's compile here: measured in the child where it waits for that (`run`, the
    compile not paid twice), else compiled here again from its caches (the probe's own
    compile here, a different graph, does not fit)."""

    remedies: tuple[str, ...]
    compile_s: float  # the child's cold compile
    run: ChildRun | None = field(default=None, compare=False)
    timeline: dict[str, float] | None = None  # ChildCompile.timeline


def _measured_in_child(opt: Option, pre: Instead, deadline: float,
                       regime: str) -> RemedyResult:
    """The candidate verified and A/B-timed in its compile child (ChildRun.measure):
    its row, with no live candidate here; skipped when the child did not answer in
    the time left."""
    assert pre.run is not None
    got = pre.run.measure(max(0.0, deadline - time.perf_counter()))
    if got is None:
        row = RemedyResult(opt.name, regime, "skipped", (
            "abandoned: compiled in a child process, which did not verify and time it "
            "within the --budget-s left"), components=opt.components)
    else:
        row = RemedyResult(**{k: v for k, v in got.items()
                              if k in RemedyResult.__dataclass_fields__})
        row.interval = tuple(got["interval"]) if got.get("interval") else None
        row.components = opt.components
    row.compile_s = pre.compile_s
    row.checks["child_compile_s"] = pre.compile_s
    row.checks["measured_in_child"] = True
    if pre.timeline:
        row.checks["child_timeline"] = pre.timeline
    return row


def _compile_first_in_child(opt: Option, combo: list[RemedySpec], child: ChildProbe,
                            deadline: float, say: Progress,
                            by_name: dict[str, RemedySpec] | None = None,
                            overrun_s: float = 0.0
                            ) -> float | RemedyResult | Instead | None:
    """The probe's compile in a child process, stopped when what is left after it could
    no longer hold the compile again here (RECOMPILE_FACTOR of the child's time) and the
    measuring: its seconds (the search then compiles from the caches it filled), None
    when the child failed (the search compiles in process, as without a child), or the
    candidate's row when it was stopped, or too little time was left to start it or to
    compile it again here. A child that compiled another combination (the background
    one: ChildProber) stands for this one scaled by their compile modes' factors: the
    same workload's kernels, in Triton's cache. A measuring child may run `overrun_s`
    past the deadline (PROBE_OVERRUN): it compiles and measures there, nothing runs
    here after it; a compile again here keeps to the deadline."""
    left_s = deadline - time.perf_counter()
    regime = "+".join(dict.fromkeys(s.regime for s in combo))

    def skipped(reason: str) -> RemedyResult:
        return RemedyResult(opt.name, regime, "skipped", reason, components=opt.components)

    # the child's wait t (its start included) and the compile again here (at most
    # RECOMPILE_FACTOR x t) and the measuring must fit in what is left; a measuring
    # child (ChildProber.measure_ab_s) needs only the measuring left after it: where the
    # compile again here would not fit, the candidate is measured in the child
    measuring = getattr(child, "measure_ab_s", None) is not None
    if measuring:
        child_limit_s = max(0.0, left_s + overrun_s - opt.measure_s - CHILD_ANSWER_S)
        after = ("the time to measure it must be left" + (
            f", {overrun_s:.0f} s past --budget-s at most (the largest predicted gain)"
            if overrun_s > 0 else ""))
    else:
        child_limit_s = max(0.0, left_s - opt.measure_s) / (1.0 + RECOMPILE_FACTOR)
        after = "the time to compile it again here from its caches must be left"
    waiting = isinstance(child, ChildProber) and child.background is not None and (
        not child.waited_on)
    floor_s = getattr(child, "stopped_after_s", None)
    if not waiting:
        if left_s < START_S:
            return skipped(f"{left_s:.0f} s of --budget-s left: too little to start its "
                           "compile in a child process, and a compile in this one cannot "
                           "be stopped")
        if floor_s is not None and child_limit_s < floor_s:
            return skipped(
                f"a compile of this workload in a child process was stopped unfinished "
                f"after {floor_s:.0f} s; a child here could run {child_limit_s:.0f} s "
                "before its measuring (and any compile again in this process) no "
                "longer fit in --budget-s")
        say(f"  compiling first in a child process (stopped {child_limit_s:.0f} s from "
            f"now: {after})")
    else:
        say(f"  waiting for its compile in the background child (stopped "
            f"{child_limit_s:.0f} s from now: {after})")
    got = child(combo, child_limit_s)
    if got.timed_out:
        row = skipped(
            f"abandoned: its compile in a child process had not finished after "
            f"{got.waited_s:.0f} s, when too little of --budget-s was left to compile it "
            f"again in this process (~{RECOMPILE_FACTOR:g}x the child's time) and measure "
            "it (stopped there: a compile in this process could not have been)")
        row.checks["child_compile_s"] = None
        if got.timeline:
            row.checks["child_timeline"] = got.timeline
        return row
    if got.compile_s is None:
        say(f"  the child failed ({got.error}): compiling in this process")
        return None
    cold_s, of = got.compile_s, ""
    if by_name is not None and got.remedies and set(got.remedies) != set(opt.components):
        # the background child's combination: its cold compile, scaled to this one's mode
        theirs = _measured_compile([by_name[n] for n in got.remedies], got.compile_s)
        cold_s = got.compile_s * _measured_compile(combo, 1.0).factor / theirs.factor
        of = f" (of {'+'.join(got.remedies)}; ~{cold_s:.1f} s for this one)"
    again_s = RECOMPILE_FACTOR * cold_s
    left_s = deadline - time.perf_counter()
    if again_s + opt.measure_s > left_s:
        done = "+".join(got.remedies) or opt.name
        if got.run is not None and opt.measure_s <= left_s + overrun_s:
            say(f"  compiled {done} in {got.compile_s:.1f} s in a child process; "
                f"compiling {opt.name} again here (~{again_s:.0f} s) does not fit: "
                f"{done} is measured in the child")
            return Instead(got.remedies or opt.components, got.compile_s, got.run,
                           got.timeline)
        if of and RECOMPILE_FACTOR * got.compile_s + opt.measure_s <= left_s:
            say(f"  compiled {done} in {got.compile_s:.1f} s in the background; "
                f"{opt.name} (~{again_s:.0f} s to compile here) no longer fits")
            return Instead(got.remedies, got.compile_s, timeline=got.timeline)
    if got.run is not None:
        got.run.stop()  # compiled again here, or skipped
    if again_s + opt.measure_s > left_s:
        row = skipped(
            f"compiled in {got.compile_s:.1f} s in a child process{of}; compiling it "
            f"again here from its caches (~{again_s:.0f} s, {RECOMPILE_FACTOR:g}x the "
            f"child's) and measuring it (~{opt.measure_s:.0f} s) do not fit in the "
            f"{left_s:.0f} s of --budget-s left, and a compile in this process cannot be "
            "stopped")
        row.checks["child_compile_s"] = cold_s
        row.compile_s = cold_s  # later estimates scale it (_record)
        return row
    say(f"  compiled in {got.compile_s:.1f} s in a child process{of}; again here, from "
        "its caches")
    return cold_s


def _record(opt: Option, got: RemedyResult, ctx: Context,
            gains: dict[str, Gain], state: SearchState, results: list[RemedyResult],
            by_name: dict[str, RemedySpec], cold_s: float | None = None,
            say: Progress | None = None) -> RemedyResult:
    """The candidate's row, with the plan's figures, in `results`; its outcome in
    `state`; the first compile measured (the child's cold one where there was one)
    scales every later estimate."""
    combo = [by_name[n] for n in opt.components]
    got.predicted_speedup = opt.predicted
    if opt.predicted is None and len(opt.components) == 1 and opt.name in gains:
        # a predicted loss (under 1) is no gain to plan by, but the row shows it beside
        # what was measured
        got.predicted_speedup = predicted_loss(ctx.budget, gains[opt.name])
    got.prediction_basis = _basis(ctx, opt.components, gains, by_name)
    got.snippet = _row(opt.name, opt.components, by_name, "", "", ctx).snippet
    got.checks["plan"] = {"tier": TIER_NAMES[opt.tier], "estimated_prep_s": opt.prep_s,
                          "estimated_s": opt.cost_s, "prep_basis": opt.prep_basis,
                          "probe": opt.probe}
    results.append(got)
    state.done[opt.name] = Outcome(got.status, got.measured_speedup, got.compile_s)
    compile_s = cold_s or got.compile_s
    compiles = any(s.prep == PREP_COMPILE for s in combo)
    if compiles and compile_s and state.measured_compile is None:
        state.measured_compile = _measured_compile(combo, compile_s)
        # an option held compiled aside had no compile estimated (plan.ASIDE_BASIS)
        estimated = opt.prep_prior and opt.prep_basis != ASIDE_BASIS
        if got.status != "failed":  # the next search's first estimate starts from it
            compile_record.record(state.device, state.n_ops, state.measured_compile.factor,
                                  compile_s, opt.name, opt.prep_s if estimated else None)
        if estimated and got.status != "failed" and say is not None:
            say(f"  compile: estimated ~{opt.prep_s:.1f} s ({opt.prep_basis}), measured "
                f"{compile_s:.1f} s ({compile_s / max(opt.prep_s, 1e-9):.2f}x the "
                "estimate); later estimates scale the measured one")
    if say is not None:
        meas = f" {got.measured_speedup:.2f}x" if got.measured_speedup else ""
        say(f"  -> {got.status}{meas}" + ("" if got.status == "verified"
                                          else f": {got.reason[:120]}"))
    return got


def _measured_compile(combo: list[RemedySpec], compile_s: float) -> MeasuredCompile:
    modes = [s.compile_mode or "default" for s in combo
             if s.prep == PREP_COMPILE and s.group == "execution"] or ["default"]
    mode = max(modes, key=lambda m: MODE_FACTOR.get(m, 1.0))
    freezing = any(s.group == "freezing" for s in combo)
    return MeasuredCompile(compile_s, compile_factor(mode, freezing))


def best_callable(cand: Candidate | None, ref: Reference) -> Callable[..., Any]:
    """A callable running the best configuration on gobrrr's copy of the model. With
    no arguments it calls the copy's own inputs; with arguments, a captured CUDA graph
    copies them into its static inputs (same shapes) before replaying."""
    import torch

    if cand is None:
        work = ref.work
        return lambda *a, **k: work.fn(*(a or work.args), **(k or work.kwargs))
    c = cand

    def run(*args: Any, **kwargs: Any) -> Any:
        with switches_on(c):
            if c.replay is None:
                return c.fn(*(args or c.args), **(kwargs or c.kwargs))
            for new, static in zip(args, c.args, strict=False):
                if isinstance(new, torch.Tensor) and isinstance(static, torch.Tensor):
                    if new.shape != static.shape:
                        raise ValueError(f"a captured graph needs inputs of shape "
                                         f"{tuple(static.shape)}, got {tuple(new.shape)}")
                    static.copy_(new)
            return c.replay()

    return run
