"""The search plan: which candidates to run, in which order, and which to skip, from
predicted gains, preparation estimates and the time left. Pure functions over numbers:
every decision can be tested exactly; runner.py measures, then asks again after each
candidate (a measured compile rescales the estimates, a verified remedy joins the stack).

The order spends time where the gain is:
1. Probes (TIER_PROBE): remedies that cost a few calls (a flag flip, a mutation of the
   copy, a CUDA-graph capture), largest predicted gain first. They check the cheap
   predictions, and their winners form the *stack*. Where several members of one group
   verified and the CUDA-graph capture did, each is then also measured captured
   (`replay_probes`, still TIER_PROBE), and the stack takes the fastest there.
2. The stack together (TIER_STACK), alone and captured in a CUDA graph: the remedies that
   multiply (precision x graphs, inference mode x anything) before any compile.
3. The stack under each compile but max-autotune (TIER_COMPILE): default,
   reduce-overhead, freezing, reduce-overhead + freezing, largest predicted gain first.
   The first compile measured scales the estimates of the others, whatever its mode.
   Until 2026-12-02 the default compile came first, alone in its tier: at --budget-s 60
   on the H200 it took the time the better mode needed (BERT-base: the stack compiled
   in the default mode 2.31x in 18 s, then reduce-overhead, the hand search's best at
   6.19x, did not fit), and reduce-overhead measured at least the default's speedup on
   every one of eight H200 workloads where both ran.
4. (TIER_COSTLY: no longer assigned; kept so that saved plans still read.)
5. max-autotune (TIER_AUTOTUNE), last of the compiles, so the modes it must beat are
   measured by then: only when its predicted gain over the best of them pays for its
   compile (MAX_AUTOTUNE_MIN_GAIN) and its compile fits.
6. What the combinations already cover (TIER_REST): a compile alone, for the table.
Within a tier: predicted gain, then catalog order. An option starts only when its
estimated cost (preparation + verification + A/B timing) fits in the time left after the
options before it; an in-process compile cannot be interrupted, so the estimate decides,
with one exception: the option predicting the largest gain (over PROBE_MIN_SPEEDUP) is
not skipped on the prior guess of its compile (a constant plus a cost per op, often off
by 3-5x) while its measuring fits: it runs as a probe, abandoned at the deadline between
calls like any candidate, and its measured compile rescales every later estimate.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

from gobrrr.gains import Gain, combine
from gobrrr.remedies.base import PREP_CAPTURE, PREP_COMPILE, PREP_FLAG
from gobrrr.remedies.compile_record import RecordedCompile
from gobrrr.remedies.verify import AB_BLOCK_S, AB_MIN_ROUNDS

if TYPE_CHECKING:
    from gobrrr.budget import Budget

__all__ = ["Option", "Skip", "Plan", "plan", "Entry", "Outcome", "stack", "options",
           "predicted_stack", "background_compile", "option_for",
           "compile_prep_s", "measure_s", "TIER_PROBE", "TIER_STACK", "TIER_COMPILE",
           "TIER_COSTLY", "TIER_AUTOTUNE", "TIER_REST", "TIER_NAMES", "SearchState",
           "MeasuredCompile", "compile_factor", "MODE_FACTOR", "FREEZING_FACTOR",
           "MAX_AUTOTUNE_MIN_GAIN", "COMPILE_BASE_S", "COMPILE_PER_OP_S", "EXEC_GROUPS",
           "ASIDE_BASIS",
           "diagnose_budget", "DIAGNOSE_SHARE", "STACK_TIE", "replay_probes", "gain_key",
           "REPLAY_MODES"]

TIER_PROBE, TIER_STACK, TIER_COMPILE, TIER_COSTLY, TIER_AUTOTUNE, TIER_REST = range(6)
TIER_NAMES = {TIER_PROBE: "probe", TIER_STACK: "stack", TIER_COMPILE: "default compile",
              TIER_COSTLY: "costlier compile", TIER_AUTOTUNE: "max-autotune",
              TIER_REST: "alone"}

# Compile time before any compile was measured: Inductor lowers an FX graph with about
# one node per aten op of the call, and its time grows with the ops that make kernels
# (views make none). Measured on this project's 2-core CPU (torch 2.13, cold caches): a
# 12-op MLP (8 not views) 9.1 s, of which 5-8 s is Inductor's first start in the process;
# 60 such ops 6.1 s and 180 ops 15.9 s once started: ~0.08 s per op. On CUDA each fused
# kernel is a Triton compile (in parallel workers). The first cold compiles optimize
# logged on H100s and H200s (torch 2.11, sessions q-al; benchmarks/compile_prior.py, its
# table in benchmarks/results/compile_prior.md), the mode's factor taken out: 9.7-17.3 s
# at 101-219 ops, 20.2-38.8 s at 936 ops. 13 s + 0.028 s per op is the line under which
# none of them falls (15.5 s at 101 ops, 17.3 s at 174, 38.8 s at 936; the others up to
# 1.9x under it): an estimate too low starts a compile that overruns --budget-s, one too
# high skips one that fits. The assumption before (15 s + 0.1 s per op) was 1.6-3.5x
# over them. Only the first compile rests on these: every later estimate scales the
# first compile measured.
COMPILE_BASE_S = {"cpu": 8.0, "cuda": 13.0}
COMPILE_PER_OP_S = {"cpu": 0.08, "cuda": 0.028}
# A mode's compile time relative to the default mode's, for the same graph:
# - reduce-overhead: the same Inductor compile, plus CUDA-graph recording on the first
#   calls (a few calls' worth) and the cudagraph-tree bookkeeping: ~1.2x.
# - max-autotune: every GEMM/conv shape benchmarked against Triton templates, each
#   template compiled: 5-20x the default (234 s for GPT-2 small on an H200, where the
#   default compile takes tens of seconds). The plan takes the top of that range: an
#   estimate too low starts a compile that cannot be stopped and overruns --budget-s,
#   one too high only skips a mode whose gain over cuBLAS is rarely large.
MODE_FACTOR = {"default": 1.0, "reduce-overhead": 1.2, "max-autotune": 20.0}
# Freezing adds constant folding and (on CPU) weight prepacking passes to the compile.
FREEZING_FACTOR = 1.1
# max-autotune must be predicted at least this much faster than the best compile already
# measured (or predicted) with the same remedies to be worth its compile.
MAX_AUTOTUNE_MIN_GAIN = 1.1
# The option predicting the largest gain, above this, runs as a probe even when the prior
# guess of its compile does not fit the time left (plan()).
PROBE_MIN_SPEEDUP = 1.05
# Two members of a stack group measured within this ratio of each other tie (stack()).
STACK_TIE = 1.05
# torch.compile's modes that replay the compiled graph in a CUDA graph.
REPLAY_MODES = ("reduce-overhead", "max-autotune")
# Groups whose remedies execute the step (compile, capture) or modify that execution.
EXEC_GROUPS = ("execution", "freezing")

# What the harness does with each candidate besides preparing it (evaluate.py,
# verify.ab_time): 3 warm calls, 2 verification calls, one call of each side to size the
# A/B blocks, then at least 8 ABBA rounds of two blocks, each block at least block_s and
# at least one call, until the A/B budget is spent.
_CANDIDATE_CALLS = 6
_CAPTURE_CALLS = 4  # 3 warm-up calls on a side stream, then the captured one


@dataclass(frozen=True)
class Option:
    """One candidate the search may run: a remedy alone or several together."""

    name: str
    components: tuple[str, ...]
    tier: int
    predicted: float | None  # whole-workload speedup predicted (None: no prediction)
    prep_s: float  # estimated preparation: compile, capture, autotuning
    measure_s: float  # estimated verification and A/B timing
    rank: int = 0  # catalog order: ties, and runs without predictions
    prep_basis: str = ""  # how prep_s was estimated (said when it is skipped)
    # (name, speedup) of the best cheaper option this one must beat by MAX_AUTOTUNE_MIN_GAIN
    worth_over: tuple[str, float] | None = None
    prep_prior: bool = False  # prep_s is the prior guess, before any compile was measured
    probe: bool = False  # run although its estimate does not fit (plan: PROBE_MIN_SPEEDUP)
    replays: bool = False  # runs under a CUDA-graph replay: wins a tie (`gain_key`)

    @property
    def cost_s(self) -> float:
        return self.prep_s + self.measure_s


@dataclass(frozen=True)
class Skip:
    name: str
    reason: str


@dataclass(frozen=True)
class Plan:
    order: tuple[Option, ...]  # what runs, first to last, if the estimates hold
    skipped: tuple[Skip, ...]


def gain_key(o: Option) -> tuple[float, bool]:
    """What ranks options by their predicted gain: the gain (to two decimals, as shown),
    then, of two predicted alike, the one that runs under a CUDA-graph replay. A replay
    issues no launch, so the default compile's fewer launches, capped at what the
    graph-replay experiment removed, can at most equal reduce-overhead's replay
    (gains.SUBSUMED_BY), where its host floor is an estimate (each compiled launch
    costing what an eager one did) and the replay's is measured. On an H100 (session ai)
    GPT-2 8x512's bf16 cast + inference mode was predicted 8.96x under both modes; the
    default mode, first by name, was compiled in the background and measured 3.97x, and
    reduce-overhead, 8.11x in the next run, no longer fitted. Reduce-overhead measured
    at least the default's speedup on eight of eight H200 workloads where both ran
    (module docstring)."""
    return round(o.predicted or 0.0, 2), o.replays


def _priority(o: Option) -> tuple[int, float, bool, int, str]:
    # no prediction sorts after every predicted gain of its tier
    predicted, replays = gain_key(o)
    return o.tier, -predicted, not replays, o.rank, o.name


def _secs(s: float) -> str:
    return f"{s:.1f} s" if s < 10 else f"{s:.0f} s"


def _largest(options: Sequence[Option]) -> Option | None:
    """The option predicting the largest gain, if above PROBE_MIN_SPEEDUP."""
    best = max((o for o in options if o.predicted and o.worth_over is None),
               key=gain_key, default=None)
    return best if best is not None and (best.predicted or 0) > PROBE_MIN_SPEEDUP else None


def plan(options: Sequence[Option], time_left_s: float,
         probe_overrun_s: float = 0.0) -> Plan:
    """Order `options` (module docstring) and skip those not worth their cost or that do
    not fit in `time_left_s` after the ones before them. The option predicting the
    largest gain is not skipped on a prior guess of its preparation alone (issue 24: a
    GPT-2 step's compile guessed at 109 s took 24-35 s): while its measuring fits, it
    runs as a probe, abandoned at the deadline like any candidate. `probe_overrun_s`:
    how far past the deadline that probe may run (in a measuring child: runner.py's
    PROBE_OVERRUN); its measuring must fit in the time left and that together (the H100,
    session ah: the GPT-2 training step's probe, its compile begun in the background
    before the diagnosis, was skipped with 0.9 s left for its 1.9 s of measuring, where
    the same stack had measured 4.44x, the search's best 2.57x)."""
    order: list[Option] = []
    skipped: list[Skip] = []
    spent_s = 0.0
    largest = _largest(options)
    for o in sorted(options, key=_priority):
        if o.worth_over is not None:
            twin, twin_speedup = o.worth_over
            if o.predicted is None:
                skipped.append(Skip(o.name, f"no predicted gain over {twin} to pay for its "
                                            f"~{_secs(o.prep_s)} compile"))
                continue
            ratio = o.predicted / twin_speedup
            if ratio < MAX_AUTOTUNE_MIN_GAIN:
                skipped.append(Skip(o.name, (
                    f"predicted {o.predicted:.2f}x, {ratio:.2f}x over {twin} "
                    f"({twin_speedup:.2f}x): under the {MAX_AUTOTUNE_MIN_GAIN:.2f}x that "
                    f"pays for its ~{_secs(o.prep_s)} compile")))
                continue
        left_s = time_left_s - spent_s
        if (o.cost_s > left_s and o is largest and o.prep_prior
                and o.measure_s < left_s + probe_overrun_s):
            order.append(replace(o, probe=True))
            spent_s = time_left_s  # what it takes is unknown: nothing is planned after it
            continue
        if o.cost_s > left_s:
            how = f" ({o.prep_basis})" if o.prep_basis else ""
            skipped.append(Skip(o.name, (
                f"needs ~{_secs(o.cost_s)}: preparation ~{_secs(o.prep_s)}{how} + "
                f"measuring ~{_secs(o.measure_s)}; {_secs(max(0.0, left_s))} of --budget-s "
                "left")))
            continue
        order.append(o)
        spent_s += o.cost_s
    return Plan(tuple(order), tuple(skipped))


# ------------------------------------------------------------------ estimates


def measure_s(call_s: float, ab_budget_s: float, device: str) -> float:
    """Seconds to verify and A/B-time one candidate whose calls take about `call_s`."""
    block_s = max(AB_BLOCK_S.get(device, AB_BLOCK_S["cpu"]), call_s)
    ab_s = max(ab_budget_s + 2 * block_s, 2 * AB_MIN_ROUNDS * block_s)
    return _CANDIDATE_CALLS * call_s + ab_s


@dataclass(frozen=True)
class MeasuredCompile:
    """The first compile the search measured: what later estimates scale."""

    prep_s: float
    factor: float  # its mode's MODE_FACTOR (x FREEZING_FACTOR)


def compile_factor(mode: str, freezing: bool) -> float:
    return MODE_FACTOR.get(mode, 1.0) * (FREEZING_FACTOR if freezing else 1.0)


def compile_prep_s(device: str, n_ops: int, mode: str, freezing: bool,
                   measured: MeasuredCompile | None,
                   recorded: RecordedCompile | None = None) -> tuple[float, str]:
    """(seconds, basis) to compile the workload in `mode`: the first measured compile
    scaled by the modes' factors, else this machine's recorded compile nearest in size
    (compile_record.py) scaled to this graph's size by the prior's own slope, else the
    prior from the graph size."""
    factor = compile_factor(mode, freezing)
    scaled = f" x {factor:g} ({mode}{' + freezing' if freezing else ''})" \
        if factor != 1 else ""
    if measured is not None:
        s = measured.prep_s * factor / measured.factor
        base = f"the measured compile {_secs(measured.prep_s)}"
        if measured.factor != 1:
            base += f" / {measured.factor:g}"
        return s, base + scaled
    base_s = COMPILE_BASE_S.get(device, COMPILE_BASE_S["cuda"])
    per_op_s = COMPILE_PER_OP_S.get(device, COMPILE_PER_OP_S["cuda"])
    if recorded is not None:
        size = (base_s + n_ops * per_op_s) / (base_s + recorded.n_ops * per_op_s)
        s = recorded.seconds / recorded.factor * size * factor
        was = (f", estimated then {_secs(recorded.estimate_s)}"
               if recorded.estimate_s else "")
        return s, (f"this machine's compile of a {recorded.n_ops}-op graph "
                   f"({recorded.mode}), {_secs(recorded.seconds)} on {recorded.at[:10]}"
                   f"{was}, scaled to {n_ops} ops{scaled}")
    s = (base_s + n_ops * per_op_s) * factor
    return s, f"{base_s:g} s + {n_ops} ops x {per_op_s:g} s{scaled}, before any compile"


# ------------------------------------------------------------------ the options


@dataclass(frozen=True)
class Entry:
    """What the plan needs to know of one applicable remedy (a RemedySpec, its gain)."""

    name: str
    group: str
    prep: str  # PREP_FLAG | PREP_CAPTURE | PREP_COMPILE
    stage: int
    gain: Gain
    rank: int
    compile_mode: str | None = None
    keep_when_neutral: bool = False
    excludes: tuple[str, ...] = ()


@dataclass(frozen=True)
class Outcome:
    """What running an option gave."""

    status: str
    measured: float | None = None  # speedup
    prep_s: float | None = None  # measured preparation (compile_s)


@dataclass
class SearchState:
    """Everything options() reads: the remedies, what ran, the workload's size and speed."""

    entries: list[Entry]
    device: str
    n_ops: int  # aten ops of one call that are not views (compile_prep_s)
    call_s: float
    ab_budget_s: float
    budget: Budget | None = None  # for combined predictions
    done: dict[str, Outcome] = field(default_factory=dict)  # option name -> outcome
    measured_compile: MeasuredCompile | None = None
    recorded_compile: RecordedCompile | None = None  # this machine's, nearest in size
    # the combination the search's background child has compiled and holds, waiting to
    # be measured (runner.ChildProber.compiled_aside): an option of its own, with no
    # compile to estimate. On an H100 (session am) GPT-2 1x1's child compiled the bf16
    # cast + inference mode + reduce-overhead stack; the cast, 0.91x alone, left the
    # stack, and its option came back only once 6.9 s were left, "needs ~14 s" for a
    # compile the child had done. The hand search measured that stack 7% above the fp32
    # one the search ended on.
    compiled_aside: tuple[str, ...] | None = None


def _is_exec(e: Entry) -> bool:
    return e.group in EXEC_GROUPS


def _cheap(e: Entry) -> bool:
    return e.prep in (PREP_FLAG, PREP_CAPTURE)


def _kernel_s(e: Entry) -> float:
    """Seconds of compute and memory time the remedy's prediction removes: what shows
    once the host's work is gone (under a replay or a compile)."""
    return sum(v for k, v in e.gain.saved_s.items() if k != "overhead")


def _wins(score: float, e: Entry, held: tuple[float, Entry]) -> bool:
    """Whether `e` (measured `score`) replaces the group's `held` member: the faster,
    unless the two measured within STACK_TIE of each other, where the one predicted to
    remove more kernel time wins. Eager can hide it: on the H200 the GPT-2 training step
    measured TF32 1.38x and bf16 autocast 1.34x, both held back by the host issuing the
    step, and under reduce-overhead the hand search's best used autocast (5.26x)."""
    held_score, held_e = held
    if score > 0 and held_score > 0 and max(score, held_score) < STACK_TIE * min(
            score, held_score):
        return _kernel_s(e) > _kernel_s(held_e)
    return score > held_score


def _capture(entries: Sequence[Entry], done: dict[str, Outcome]) -> Entry | None:
    """The CUDA-graph capture remedy, when it verified faster alone (or correct without
    a significant change): what the replay probes run under."""
    for e in entries:
        got = done.get(e.name)
        if e.prep == PREP_CAPTURE and e.group == "execution" and got is not None \
                and got.status in ("verified", "no significant change"):
            return e
    return None


def _joined(parts: Sequence[Entry]) -> str:
    return "+".join(e.name for e in sorted(parts, key=lambda e: (e.stage, e.rank)))


def _under_capture(e: Entry, graphs: Entry, budget: Budget | None) -> float | None:
    """The speedup `e` is predicted to add under the capture: predicted(e + capture) over
    predicted(capture). Under the capture the host's issuing is gone, so a kernel saving
    the eager floor hides (`gains.time_floor_s`) shows; None without a budget or a
    prediction. A capture predicted no gain alone (a device-bound call, or a replay the
    experiment read no faster than eager) counts as 1.0x: it still leaves no issuing
    (`Gain.host_left_s`). On an H100 (session ai) the GPT-2 training step's replay read
    0.81x beside the background compile; the capture's prediction was then none, the
    bf16 autocast that eager measured 0.82x beside it was never measured under the
    capture, and the stack the child had compiled with it (3.91x in another run) was
    never run: the search ended at 1.48x."""
    if budget is None:
        return None
    both = combine(budget, [e.gain, graphs.gain], [e.name, graphs.name]).speedup
    return both / (graphs.gain.speedup or 1.0) if both else None


def _hidden(e: Entry, graphs: Entry, done: dict[str, Outcome],
            budget: Budget | None) -> bool:
    """A cheap remedy eager measured correct but not faster (no significant change, or
    slower) whose predicted kernel saving shows under the capture (`_under_capture`, at
    least PROBE_MIN_SPEEDUP): eager's host issuing hid it. On the H200 (session ab)
    ResNet-50 b1's bf16 cast measured 0.82x in eager and GPT-2 1x1's 0.92x, and the hand
    search's best stacks on both held the cast (7.46x and 9.08x, against the search's
    7.06x and 8.45x without it). A `keep_when_neutral` one is in the stack anyway."""
    got = done.get(e.name)
    if got is None or got.status not in ("no significant change", "slower") \
            or e.keep_when_neutral:
        return False
    ratio = _under_capture(e, graphs, budget)
    return ratio is not None and ratio >= PROBE_MIN_SPEEDUP


def replay_probes(entries: Sequence[Entry], done: dict[str, Outcome],
                  budget: Budget | None = None) -> list[list[Entry]]:
    """Each verified member of a group where several verified, under the CUDA-graph
    capture: measured with the host's issuing gone, as they will run under a replay or a
    compile (`stack`). Eager ranks them by wall time, host included: on the H200 GPT-2
    8x512 measured TF32 2.12x and the bf16 cast 1.77x in eager (1.84x and 1.94x in
    another sitting), where under reduce-overhead the bf16 cast made 8.35x and TF32
    3.53x. A member eager hid (`_hidden`: correct, not faster in eager, predicted to gain
    under the capture) is measured there too, with the verified ones of its group."""
    graphs = _capture(entries, done)
    if graphs is None:
        return []
    by_group: dict[str, list[Entry]] = {}
    hidden: set[str] = set()
    for e in entries:
        got = done.get(e.name)
        if got is None or not _cheap(e) or _is_exec(e) or e.name in graphs.excludes \
                or graphs.name in e.excludes:
            continue
        if got.status == "verified":
            by_group.setdefault(e.group, []).append(e)
        elif _hidden(e, graphs, done, budget):
            by_group.setdefault(e.group, []).append(e)
            hidden.add(e.name)
    return [[e, graphs] for members in by_group.values()
            if len(members) > 1 or members[0].name in hidden for e in members]


def _replayed(e: Entry, entries: Sequence[Entry], done: dict[str, Outcome]
              ) -> float | None:
    graphs = _capture(entries, done)
    if graphs is None:
        return None
    got = done.get(_joined([e, graphs]))
    return got.measured if got is not None and got.status == "verified" else None


def stack(entries: Sequence[Entry], done: dict[str, Outcome]) -> list[Entry]:
    """The cheap winners that go together: per group (exclusive), the remedy measured
    fastest among those verified faster (`_wins`: a tie goes to the larger predicted
    kernel saving); where every verified member of the group was also measured under the
    CUDA-graph capture (`replay_probes`), the fastest there; a `keep_when_neutral` one
    (inference mode, a fused optimizer) also when it was correct without a significant
    change alone; one eager measured not faster that was measured under the capture
    (`replay_probes`) at least PROBE_MIN_SPEEDUP x the capture alone: eager's host hid it.
    Execution remedies are not in it: they are what the stack is run under."""
    best: dict[str, tuple[float, Entry]] = {}
    replayed: dict[str, dict[str, float | None]] = {}
    graphs = _capture(entries, done)
    alone = done[graphs.name].measured if graphs is not None else None
    for e in entries:
        got = done.get(e.name)
        if got is None or _is_exec(e) or not _cheap(e):
            continue
        if got.status == "verified":
            score = got.measured or 1.0
            replayed.setdefault(e.group, {})[e.name] = _replayed(e, entries, done)
        elif got.status == "no significant change" and e.keep_when_neutral:
            score = 0.0  # below any verified member of its group
        elif (under := _replayed(e, entries, done)) is not None and alone \
                and under >= PROBE_MIN_SPEEDUP * alone:
            score = 0.0  # eager hid it: the capture's figures rank it (below)
            replayed.setdefault(e.group, {})[e.name] = under
        else:
            continue
        if e.group not in best or _wins(score, e, best[e.group]):
            best[e.group] = (score, e)
    for group, scores in replayed.items():
        if len(scores) > 1 and all(v for v in scores.values()):
            name = max(scores, key=lambda n: scores[n] or 0.0)
            best[group] = (scores[name] or 0.0, next(e for e in entries if e.name == name))
    members = [e for _, e in best.values()]
    names = {e.name for e in members}
    members = [e for e in members if not set(e.excludes) & names]
    return sorted(members, key=lambda e: (e.stage, e.rank))


def predicted_stack(entries: Sequence[Entry], budget: Budget | None = None
                    ) -> list[Entry]:
    """The stack (`stack`) the predictions alone would form, before any probe ran: each
    cheap remedy predicted at least PROBE_MIN_SPEEDUP faster counts as verified at its
    prediction, a `keep_when_neutral` one (inference mode, a fused optimizer) as
    neutral unless predicted slower. With the `budget` and a capture remedy, a remedy is
    predicted at the larger of its own gain and the one it adds under the capture
    (`_under_capture`: what eager's host floor hides, which the compiles remove too).
    What the background compile guesses the search will compile."""
    graphs = next((e for e in entries if e.prep == PREP_CAPTURE and e.group == "execution"),
                  None)
    done: dict[str, Outcome] = {}
    for e in entries:
        if not _cheap(e) or _is_exec(e):
            continue
        speedup = e.gain.speedup
        if graphs is not None and e.name not in graphs.excludes:
            under = _under_capture(e, graphs, budget)
            if under is not None and (speedup is None or under > speedup):
                speedup = under
        if speedup is not None and speedup >= PROBE_MIN_SPEEDUP:
            done[e.name] = Outcome("verified", speedup)
        elif e.keep_when_neutral and (speedup is None or speedup >= 1.0):
            done[e.name] = Outcome("no significant change", 1.0)
    return stack(entries, done)


def background_compile(state: SearchState) -> Option | None:
    """The compile to start in the background before any candidate ran (runner.py,
    ChildProber): the predicted stack (`predicted_stack`) under each compile mode but
    max-autotune, with freezing where options() adds it, the one predicting the largest
    gain; None without predictions. The first plan's own compile probe is often not it:
    on the H200 (session j) ResNet-50 b256's first plan ran no compile (a cheap remedy
    predicted the largest gain and the compiles' guessed 35-132 s did not fit), and the
    stack's compile, probed 35 s in, had too little time left to finish in a child."""
    entries = state.entries
    members = predicted_stack(entries, state.budget)
    names = {m.name for m in members}
    execs = [e for e in entries if e.prep == PREP_COMPILE and e.group == "execution"
             and e.compile_mode != "max-autotune" and not set(e.excludes) & names]
    freezing = [f for f in entries if f.group == "freezing"
                and not set(f.excludes) & names]
    combos: list[list[Entry]] = [[*members, e] for e in execs]
    combos += [[*members, e, f] for e in execs for f in freezing
               if e.compile_mode == "reduce-overhead" and e.name not in f.excludes]
    if members:
        combos += [[*members, f] for f in freezing]
    found = [o for o in (_option(state, parts, TIER_COMPILE) for parts in combos)
             if o.predicted]
    return max(found, key=gain_key, default=None)


def option_for(state: SearchState, names: Sequence[str]) -> Option:
    """The option of exactly these remedies (a combination options() may not list: the
    background compile's, run instead of a probe that no longer fits)."""
    by_name = {e.name: e for e in state.entries}
    return _option(state, [by_name[n] for n in names], TIER_COMPILE)


def _combined(state: SearchState, parts: Sequence[Entry]) -> float | None:
    if len(parts) == 1:
        return parts[0].gain.speedup
    if state.budget is None:
        return None
    return combine(state.budget, [e.gain for e in parts], [e.name for e in parts],
                   compiled=any(e.prep == PREP_COMPILE for e in parts)).speedup


# what an option the background child holds compiled costs before its measuring
ASIDE_BASIS = ("compiled in the background child: measured there, or compiled again here "
               "from its caches where that fits")


def _prep(state: SearchState, parts: Sequence[Entry]) -> tuple[float, str]:
    compiles = [e for e in parts if e.prep == PREP_COMPILE]
    if compiles and state.compiled_aside is not None \
            and {e.name for e in parts} == set(state.compiled_aside):
        return 0.0, ASIDE_BASIS
    if compiles:
        modes = [e.compile_mode or "default" for e in compiles
                 if e.group == "execution"] or ["default"]
        mode = max(modes, key=lambda m: MODE_FACTOR.get(m, 1.0))
        freezing = any(e.group == "freezing" for e in compiles)
        return compile_prep_s(state.device, state.n_ops, mode, freezing,
                              state.measured_compile, state.recorded_compile)
    if any(e.prep == PREP_CAPTURE for e in parts):
        return _CAPTURE_CALLS * state.call_s, f"{_CAPTURE_CALLS} calls to capture"
    return 0.0, ""


def _option(state: SearchState, parts: Sequence[Entry], tier: int,
            worth_over: tuple[str, float] | None = None) -> Option:
    parts = sorted(parts, key=lambda e: (e.stage, e.rank))
    prep_s, basis = _prep(state, parts)
    prior = state.measured_compile is None and any(e.prep == PREP_COMPILE for e in parts)
    replays = any(e.prep == PREP_CAPTURE or e.compile_mode in REPLAY_MODES for e in parts)
    return Option("+".join(e.name for e in parts), tuple(e.name for e in parts), tier,
                  _combined(state, parts), prep_s,
                  measure_s(state.call_s, state.ab_budget_s, state.device),
                  min(e.rank for e in parts), basis, worth_over, prior, replays=replays)


def _compile_tier(e: Entry) -> int:
    return TIER_AUTOTUNE if e.compile_mode == "max-autotune" else TIER_COMPILE


def _best_compile(state: SearchState, prefix: tuple[str, ...],
                  entries: Sequence[Entry]) -> tuple[str, float] | None:
    """The compile of the same stack measured fastest (else predicted fastest): what
    max-autotune must beat."""
    found: list[tuple[str, float]] = []
    for e in entries:
        if e.prep != PREP_COMPILE or e.compile_mode == "max-autotune" \
                or e.group != "execution":
            continue
        name = "+".join([*prefix, e.name]) if prefix else e.name
        got = state.done.get(name)
        if got is not None and got.measured is not None and got.status in (
                "verified", "no significant change", "slower"):
            found.append((name, got.measured))
    if not found:
        for e in entries:
            if e.prep == PREP_COMPILE and e.group == "execution" \
                    and e.compile_mode != "max-autotune" and e.gain.speedup:
                parts = [*[x for x in entries if x.name in prefix], e]
                pred = _combined(state, parts)
                if pred:
                    found.append(("+".join(p.name for p in sorted(
                        parts, key=lambda x: (x.stage, x.rank))), pred))
    return max(found, key=lambda f: f[1]) if found else None


def _aside(state: SearchState) -> list[Entry] | None:
    """The entries of the combination compiled aside (SearchState.compiled_aside), an
    option whether or not the stack still holds all of it; None where there is none."""
    if state.compiled_aside is None:
        return None
    by_name = {e.name: e for e in state.entries}
    if not all(n in by_name for n in state.compiled_aside):
        return None
    return [by_name[n] for n in state.compiled_aside]


def options(state: SearchState) -> list[Option]:
    """Every option not run yet, with its tier (module docstring). The stack exists once
    every probe has run: until then the probes come first anyway."""
    entries = state.entries
    probes_left = any(_cheap(e) and e.name not in state.done for e in entries)
    replays = [] if probes_left else [
        parts for parts in replay_probes(entries, state.done, state.budget)
        if _joined(parts) not in state.done]
    members = [] if probes_left or replays else stack(entries, state.done)
    out: list[Option] = [_option(state, parts, TIER_PROBE) for parts in replays]
    for e in entries:
        if _cheap(e):
            tier = TIER_PROBE
        elif members:
            tier = TIER_REST
        else:
            tier = _compile_tier(e)
        worth = None
        if e.compile_mode == "max-autotune":
            worth = _best_compile(state, (), entries)
        out.append(_option(state, [e], tier, worth))
    if members:
        names = {m.name for m in members}
        prefix = tuple(m.name for m in members)
        if len(members) >= 2:
            out.append(_option(state, members, TIER_STACK))
        execs = [e for e in entries if _is_exec(e)
                 and not (set(e.excludes) & names) and e.group == "execution"]
        for e in execs:
            tier = TIER_STACK if e.prep == PREP_CAPTURE else _compile_tier(e)
            worth = None
            if e.compile_mode == "max-autotune":
                worth = _best_compile(state, prefix, entries)
            out.append(_option(state, [*members, e], tier, worth))
        freezing = [e for e in entries if e.group == "freezing"
                    and not (set(e.excludes) & names)]
        for f in freezing:
            out.append(_option(state, [*members, f], TIER_COMPILE))
            for e in execs:
                if e.compile_mode == "reduce-overhead" and e.name not in f.excludes:
                    out.append(_option(state, [*members, e, f], TIER_COMPILE))
    aside = _aside(state) if not probes_left and not replays else None
    if aside is not None:
        out.append(_option(state, aside, TIER_COMPILE))
    seen: set[str] = set()
    fresh = []
    for o in out:
        if o.name not in state.done and o.name not in seen:
            seen.add(o.name)
            fresh.append(o)
    return fresh


# ------------------------------------------------------------------ the diagnosis

# optimize's diagnosis gets this share of --budget-s: its budget predicts every remedy,
# but only the search that follows measures them.
DIAGNOSE_SHARE = 0.25
# A diagnosis makes at most this many measurements that each sample for time_budget_s
# (timing.measure): the wall time, 2 for the CUDA-graph replay, up to 11 for batch
# scaling (2x and 4x the batch, 3 interleaved rounds). Without the experiments: the
# wall time, with room for counting and profiling the call.
DIAGNOSE_MEASUREMENTS = {True: 14, False: 3}
# The experiments feed only the batch-size advice and the doctor's evidence: below this
# share of --budget-s (20 s of budget) they are left out.
EXPERIMENTS_MIN_SHARE_S = 5.0
TIME_BUDGET_RANGE_S = (0.05, 1.0)  # 1.0: doctor's own default per measurement


def diagnose_budget(budget_s: float) -> tuple[float, bool]:
    """(time_budget_s per measurement, run the experiments) for a diagnosis that should
    take about DIAGNOSE_SHARE of `budget_s`. A workload whose single call is long still
    takes 3 calls per measurement (timing.measure): its diagnosis can take more, and the
    search then gets less."""
    share_s = DIAGNOSE_SHARE * budget_s
    experiments = share_s >= EXPERIMENTS_MIN_SHARE_S
    lo, hi = TIME_BUDGET_RANGE_S
    return min(hi, max(lo, share_s / DIAGNOSE_MEASUREMENTS[experiments])), experiments
