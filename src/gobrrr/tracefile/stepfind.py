"""A trace's steps when nobody marked them (`with profile(...):` around a few calls, no
schedule, no `prof.step()`): most traces users have. Read whole, such a trace is one
step holding the profiler's start-up and the gaps around the calls, which read as idle
GPU (seen on an H200: a pointwise chain at 89% of the bandwidth roof said
"OVERHEAD-BOUND"). The rules, first that applies:

1. `ProfilerStep#N` ranges (a profiler schedule with `prof.step()`): those.
2. A `record_function` range the user wrote that repeats at the top level of the main
   thread (the first to start of the threads with a tenth or more of the top-level
   events: the user's, not autograd's device thread) and covers at least half of its
   time: each range is a step. Ranges that name a phase (an optimizer's step, autograd,
   a DataLoader's `__next__`, prefill, decode) or cover less are parts of a step, not
   steps; so is a range with an optimizer's step between its repeats, or more than
   MAX_BETWEEN top-level calls between them on average (DDP's forward range: on a loaded
   2-core CPU its waits on the other rank made it cover more than half of the time, and
   the steps were read as its repeats).
3. A repeated sequence of top-level calls on the main thread: the longest run, at the end
   of the trace or at its start, that repeats one sequence of top-level event names at
   least twice and holds at least half of the main thread's top-level events (less is a
   repeat inside one call: two embeddings' gradients), each repeat a step (the same op
   sequence n times is n steps). Steps are back to back: a step's window runs from its
   first event to the next step's first event (the last: to the first event after the
   run, else to the end of its own last top-level event plus the median time the
   calls before it spent between their last event and the next call, not to the
   trace's end, where a `torch.cuda.synchronize()` and the profiler's exit ran once),
   so the host time between calls is the step's (steps.py).
   With three or more, a first step slower than 1.5x the median of the others is a
   warm-up and left out (not for the ranks of one job, which must agree on their
   steps). A call that is itself made of identical repeats (a stack of identical layers
   and nothing else) cannot be told from several calls: it reads as one step per
   repeat, as the note says; `prof.step()` or `record_function` settle it.
4. Otherwise one step: from the first top-level event of the main thread to the end of
   the last event or device activity, so the profiler's start-up is left out.
`one_step=True` skips rules 2 and 3 (a source that profiled one call of its own:
generation_run.py, whose forwards repeat but are not steps).
"""

from __future__ import annotations

import statistics
from dataclasses import replace

import numpy as np

from gobrrr.phases import range_label
from gobrrr.tracefile.columns import (
    ANNOTATION,
    STEP_PREFIX,
    StepRule,
    TraceColumns,
)

__all__ = ["find_steps", "repeated_run", "WARMUP_RATIO"]

WARMUP_RATIO = 1.5  # a first step this much slower than the median of the rest: warm-up
MAIN_SHARE = 0.1  # of the top-level events, for a thread to be the main one
# the autograd engine's events (on CUDA, on its device threads: never the user's calls)
AUTOGRAD_EVENT = "autograd::engine::evaluate_function"
COVERAGE = 0.5  # of the main thread's top-level events (rule 3) or time (rule 2) steps hold
# Top-level calls between a step range's repeats, on average, at the most (rule 2): the
# loop's own (a DataLoader's __next__, a copy to the device), not the step's work
MAX_BETWEEN = 2
STEP_RANGE = "Optimizer.step#"  # an optimizer's step: inside a training step's range
_MIN_REPEATS = 2


def find_steps(cols: TraceColumns, *, one_step: bool = False,
               drop_warmup: bool = True) -> TraceColumns:
    """`cols` with its steps and the rule that found them (module docstring); columns
    whose rule is already set are returned as they are. `drop_warmup=False` keeps a slow
    first repeat (the ranks of one job: each rank deciding alone, they could disagree on
    which steps they ran, and their collectives would not match)."""
    if cols.step_rule is not None:
        return cols
    if cols.steps:
        return replace(cols, step_rule=StepRule("profiler", STEP_PREFIX,
                                                f"steps: the trace's {STEP_PREFIX} ranges",
                                                f"its {STEP_PREFIX} ranges"))
    top = _top_level(cols)
    if not len(top):
        t0 = min(float(part["ts_us"].min()) for part in (cols.device, cols.launch)
                 if len(part["ts_us"]))
        return replace(cols, steps=[(0, t0, _last_end_us(cols) - t0)],
                       step_rule=StepRule("window", "the whole trace",
                                                "steps: none found (no CPU events): the "
                                                "whole trace is one step",
                                                "no CPU events: the whole trace"))
    cpu = cols.cpu
    thread = _main_thread(cpu["thread"][top], _is_autograd_name(cols)[cpu["name"][top]])
    main = top[cpu["thread"][top] == thread]
    end_us = _last_end_us(cols)
    if not one_step:
        finders = (_repeated_range,
                   lambda c, m, e: _repeated_calls(c, m, e, drop_warmup=drop_warmup))
        for finder in finders:
            found = finder(cols, main, end_us)
            if found is not None:
                steps, rule = found
                return replace(cols, steps=steps, steps_thread=thread, step_rule=rule)
    t0 = float(cpu["ts_us"][main[0]])
    return replace(cols, steps=[(0, t0, end_us - t0)], steps_thread=thread,
                   step_rule=StepRule("window", "the traced work", (
                       "steps: no ProfilerStep# ranges and nothing that repeats: one "
                       "step, from the first event of the main thread to the last event "
                       "or device activity (the profiler's start-up left out)"
                       if not one_step else
                       "steps: one step, from the first event of the main thread to the "
                       "last event or device activity (the profiler's start-up left out)"),
                       "none marked and none repeating: one, without the profiler's "
                       "start-up" if not one_step else "one, as the source asked"))


def _top_level(cols: TraceColumns) -> np.ndarray:
    """Indices of the CPU events no other event on their thread encloses, in start
    order (ties: the longer first)."""
    cpu = cols.cpu
    if not len(cpu["ts_us"]):
        return np.zeros(0, dtype=np.int64)
    order = np.lexsort((-cpu["dur_us"], cpu["ts_us"], cpu["thread"]))
    ts, dur, thread = (cpu[k][order].tolist() for k in ("ts_us", "dur_us", "thread"))
    keep: list[int] = []
    end, last_thread = -np.inf, -1
    for i in range(len(order)):
        if thread[i] != last_thread:
            end, last_thread = -np.inf, thread[i]
        if ts[i] >= end:  # else inside (or overlapping) the top-level event before it
            keep.append(int(order[i]))
            end = ts[i] + dur[i]
    out = np.array(keep, dtype=np.int64)
    return out[np.argsort(cpu["ts_us"][out], kind="stable")]


def _is_autograd_name(cols: TraceColumns) -> np.ndarray:
    """By name id: the autograd engine's own events (what its device thread runs)."""
    return np.array([n.startswith(AUTOGRAD_EVENT) for n in cols.names] or [False],
                    dtype=bool)


def _main_thread(threads: np.ndarray, autograd: np.ndarray | None = None) -> int:
    """The thread the user's calls run on: the first to start among the threads holding
    at least MAIN_SHARE of the top-level events (`threads`, in start order) that are not
    the autograd engine's own (`autograd`, where given). Not simply the busiest: on
    CUDA, autograd's device thread holds as many (the backward's), and its first event
    is the middle of a step; under DDP on two H200s it held 545 of a plain trace's 597
    top-level events (109 a step) and the user's thread 50, under MAIN_SHARE of them
    all. On CPU the backward runs on the user's thread: its engine events are not
    counted for it either."""
    counted = threads if autograd is None or autograd.all() else threads[~autograd]
    counts = np.bincount(counted, minlength=int(threads.max()) + 1 if len(threads) else 0)
    for t in threads.tolist():
        if counts[t] >= MAIN_SHARE * len(counted):
            return int(t)
    return int(counts.argmax())


def _last_end_us(cols: TraceColumns) -> float:
    ends = [float((p["ts_us"] + p["dur_us"]).max()) for p in (cols.cpu, cols.device,
                                                               cols.launch)
            if len(p["ts_us"])]
    return max(ends)


def _contiguous(starts: list[float], end_us: float) -> list[tuple[int, float, float]]:
    """Steps from each start to the next (the last: to `end_us`)."""
    bounds = [*starts[1:], end_us]
    return [(i, s, max(e - s, 0.0)) for i, (s, e) in enumerate(zip(starts, bounds,
                                                                   strict=True))]


def _repeated_range(cols: TraceColumns, main: np.ndarray, end_us: float
                    ) -> tuple[list[tuple[int, float, float]], StepRule] | None:
    """Rule 2: the user's top-level range name that repeats and covers the most time."""
    cpu, names = cols.cpu, cols.names
    ann = main[cpu["kind"][main] == ANNOTATION]
    by_name: dict[int, list[int]] = {}
    for i in ann.tolist():
        by_name.setdefault(int(cpu["name"][i]), []).append(i)
    span_us = float(cpu["ts_us"][main[-1]] + cpu["dur_us"][main[-1]] - cpu["ts_us"][main[0]])
    best: tuple[float, int] | None = None
    for n, rows in by_name.items():
        nm = names[n]
        if len(rows) < _MIN_REPEATS or range_label(nm, "\0", "\0") != (nm, "\0"):
            continue  # once only, or a phase's range (an optimizer's step, autograd...)
        covered = float(cpu["dur_us"][rows].sum())
        if covered < COVERAGE * span_us or _work_between(cols, main, rows):
            continue  # a part of each step (DDP's forward range), not the step
        if best is None or covered > best[0]:
            best = (covered, n)
    if best is None:
        return None
    rows = by_name[best[1]]
    nm = names[best[1]]
    steps = [(k, float(cpu["ts_us"][r]), float(cpu["dur_us"][r])) for k, r in
             enumerate(rows)]
    return steps, StepRule("record_function", f"{nm} #",
                           f"steps: the {len(rows)} record_function ranges \"{nm}\" (no "
                           "ProfilerStep# ranges; a range that repeats is a step)",
                           f"the record_function ranges \"{nm}\"")


def _work_between(cols: TraceColumns, main: np.ndarray, rows: list[int]) -> bool:
    """Whether the step's work runs between a range's repeats `rows` (indices into the
    CPU events, top-level on the main thread `main`): an optimizer's step, or more than
    MAX_BETWEEN top-level calls a gap on average."""
    cpu, names = cols.cpu, cols.names
    ts = cpu["ts_us"][main]
    first, last = float(cpu["ts_us"][rows[0]]), float(cpu["ts_us"][rows[-1]])
    taken = set(rows)
    between = [int(i) for i, t in zip(main.tolist(), ts.tolist(), strict=True)
               if first < t < last and int(i) not in taken]
    if any(names[cpu["name"][i]].startswith(STEP_RANGE) for i in between):
        return True
    return len(between) > MAX_BETWEEN * (len(rows) - 1)


def _periodic_prefix(tokens: list[int]) -> tuple[int, int]:
    """(period p, repeats k) of the longest start of `tokens` that repeats one sequence
    of p tokens at least twice, k = that start's length // p; (0, 0) if none. Linear:
    each prefix's minimal period from the failure function (the minimal period of a
    prefix never shrinks as it grows, so the last prefix that repeats is the longest)."""
    fail = [0] * len(tokens)
    best = (0, 0)
    k = 0
    for i in range(1, len(tokens)):
        while k and tokens[i] != tokens[k]:
            k = fail[k - 1]
        if tokens[i] == tokens[k]:
            k += 1
        fail[i] = k
        m, p = i + 1, i + 1 - k
        if m >= _MIN_REPEATS * p:
            best = (p, m // p)
    return best


def repeated_run(tokens: list[int]) -> tuple[int, int, int]:
    """(first token, period p, repeats k) of the longest run at the end or at the start
    of `tokens` that repeats one sequence of p tokens k >= 2 times; (0, 0, 0) if none.
    At the end: a warm-up or the profiler's start-up before the calls; at the start:
    something after them (a print's .item(), an evaluation)."""
    p_end, k_end = _periodic_prefix(tokens[::-1])
    p_start, k_start = _periodic_prefix(tokens)
    if k_end == k_start == 0:
        return 0, 0, 0
    if p_end * k_end >= p_start * k_start:
        return len(tokens) - p_end * k_end, p_end, k_end
    return 0, p_start, k_start


def _last_call_end(cols: TraceColumns, run: np.ndarray, p: int, starts: list[float],
                   end_us: float) -> float:
    """Where the last of the repeated calls ends when nothing follows them on the main
    thread: the end of its last top-level event plus the median time the earlier calls
    spent between their last top-level event's end and the next call's start (the
    user's loop, which the earlier windows hold too); never past `end_us`. Not the
    trace's end: the code after the loop (`torch.cuda.synchronize()`, the profiler's
    own exit) ran once, after the last call (on the H200 the pointwise chain's last
    window held 286 us against 116-135 us for the calls before it)."""
    cpu = cols.cpu
    end_of = cpu["ts_us"][run] + cpu["dur_us"][run]
    ends = [float(end_of[j * p:(j + 1) * p].max()) for j in range(len(starts))]
    loop_us = statistics.median(max(nxt - e, 0.0) for e, nxt in zip(ends, starts[1:],
                                                                       strict=False))
    return min(ends[-1] + loop_us, end_us)


def _repeated_calls(cols: TraceColumns, main: np.ndarray, end_us: float, *,
                    drop_warmup: bool = True
                    ) -> tuple[list[tuple[int, float, float]], StepRule] | None:
    """Rule 3: the repeated sequence of top-level calls at the end of the trace."""
    cpu = cols.cpu
    tokens = cpu["name"][main].tolist()
    first, p, k = repeated_run(tokens)
    if k < _MIN_REPEATS or p * k < COVERAGE * len(tokens):
        return None  # nothing repeats, or only a part of one call (two embeddings' grads)
    after = first + p * k  # the first top-level event after the run, if any
    starts = [float(cpu["ts_us"][main[first + j * p]]) for j in range(k)]
    # the last window ends just before the first event after the run (a step's window
    # holds the events that start in it, its end included); with nothing after it, at
    # the last call's end plus the loop's time between calls (_last_call_end)
    steps = _contiguous(starts, float(np.nextafter(cpu["ts_us"][main[after]], -np.inf))
                        if after < len(tokens) else
                        _last_call_end(cols, main[first:after], p, starts, end_us))
    dropped = ""
    if k >= 3 and drop_warmup:
        rest = statistics.median(s[2] for s in steps[1:])
        if steps[0][2] > WARMUP_RATIO * rest:
            dropped = (f"; the first ({steps[0][2] / 1e3:.2f} ms, {steps[0][2] / rest:.1f}x "
                       "the median of the rest) is a warm-up, left out")
            steps = [(j, s, d) for j, (_, s, d) in enumerate(steps[1:])]
    names = cols.names
    shown = ", ".join(names[t] for t in tokens[first:first + min(p, 3)])
    return steps, StepRule(
        "repeated calls", "call ",
        f"steps: the trace has no ProfilerStep# ranges; {p * k} of the "
        f"{len(tokens)} top-level events of its main thread are one sequence of {p} ({shown}"
        f"{', ...' if p > 3 else ''}) repeated {k} times, each repeat a step{dropped} (a "
        "call made of identical repeats would read as one step per repeat: prof.step() "
        "or record_function ranges settle it)",
        f"a sequence of {p} top-level calls repeated {k} times"
        f"{', the first left out as a warm-up' if dropped else ''}")
