"""Rows timed while the background compile ran, and the best of them timed again once it
had ended.

The search's background child (compile_child.py) compiles on the cores the search
leaves, at a lower priority, while the cheap candidates are timed. Its compile workers
still slow the search's host: a call its host bounds (eager dispatch) runs slower while
they work, a CUDA-graph replay does not. An A/B ratio of the two timed then is high. On
an H100 at --budget-s 60 (session aa, `benchmarks/results/h100/session-2026-12-05aa/`)
ResNet-50 b1's cuda_graphs measured 11.03x while the child compiled where, in the same
run, channels_last+inference_mode+cuda_graphs measured 6.98x, and doctor's graph-replay
experiment on that machine, no child beside it, 6.69x (session ab). So each row records
whether its A/B timing overlapped the child's compile (`checks["timed_beside_compile"]`),
and the best live row so timed is timed again as soon as the compile has ended, before
the search plans or compiles here again (runner.search): its figure is then the quiet
one, the first kept beside it (`checks["beside_compile_speedup"]`). Rows timed beside it
and not the best keep their figure; the notes name them.

A live row that holds a CUDA graph captured before a compile ran in this process is
captured again for its second timing, not replayed (`Retime` returns the candidate that
holds the row now): on an H100 (session ac) GPT-2 1x1's bf16_cast+cuda_graphs, captured
before bf16_cast+inference_mode+compile_reduce_overhead compiled in the search's
process, hit an illegal memory access on its first replay after it, which ended the run.

While the best live row waits to be timed again, the search also holds the runner-up's
candidate (`holds_runner_up`), where the device has room for it: timed again, the best
may fall below it. On an H100 (session ad) GPT-2 1x1's cuda_graphs measured 10.59x beside
the compile and 7.24x quiet, below inference_mode+compile_reduce_overhead's 8.07x, whose
candidate had been dropped: cuda_graphs was reported the best. Now the runner-up, held,
is timed again too where its figure is above the best's quiet one (`settle_runner_up`),
and the faster of the two holds the result. A runner-up timed quiet (a best timed
again before, then overtaken by a row timed beside) is compared as it is: in the same
session bf16_cast+inference_mode+cuda_graphs, timed again at 11.99x, was overtaken by
bf16_cast+inference_mode+compile_reduce_overhead's 14.22x, which timed again read 8.96x.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from gobrrr.remedies.base import Candidate, RemedyResult
from gobrrr.remedies.verify import ABResult, OutOfTime

__all__ = ["QuietCheck", "BESIDE", "BESIDE_SPEEDUP", "NotTimedAgain", "Retime",
           "captured_before_compile", "holds_runner_up", "room_for_another"]

BESIDE = "timed_beside_compile"  # the row's A/B timing overlapped the child's compile
BESIDE_SPEEDUP = "beside_compile_speedup"  # a row timed again: its first figure

# (the row, its live candidate) -> (the A/B timing, the candidate that holds the row
# now: the same, a fresh capture, or None where the fresh one was not faster)
Retime = Callable[[RemedyResult, Candidate], tuple[ABResult, Candidate | None]]


def captured_before_compile(cand: Candidate, compiles_now: int,
                            compiles_at_capture: int | None) -> bool:
    """Whether `cand` holds a CUDA graph (graphs.capture) captured before a compile that
    has since run in this process: timed again, it is captured again, not replayed."""
    return cand.compile_info.get("cuda_graph") is not None and \
        compiles_now > (compiles_at_capture or 0)


def holds_runner_up(best: RemedyResult | None, row: RemedyResult) -> bool:
    """Whether `row`'s live candidate may be held beside the best's: the best was timed
    beside the compile and not yet again (it may fall below `row`), and `row` is a
    verified row no faster than it."""
    if best is None or row is best or not best.checks.get(BESIDE) \
            or best.checks.get(BESIDE_SPEEDUP) is not None or row.status != "verified":
        return False
    return (row.measured_speedup or 0.0) <= (best.measured_speedup or 0.0)


def room_for_another(device: str) -> bool:
    """Whether the device could hold again all that this process holds on it now: a
    second live candidate must not make the next candidate run out of memory. Only CUDA
    runs a background compile (compile_child.py); elsewhere nothing is held beside."""
    if device != "cuda":
        return True  # no device memory to run out of; and no compile runs beside here
    import torch  # here: gobrrr's import stays light

    free_b, _ = torch.cuda.mem_get_info()
    return free_b >= torch.cuda.memory_reserved()


def _replace(row: RemedyResult, ab: ABResult, why: str) -> None:
    """`row`'s figures, reason and status from its second timing `ab` (`why` it was
    timed again); the reason's notes after its first part are kept."""
    row.measured_speedup, row.interval = ab.speedup, ab.interval
    row.eager_s, row.candidate_s = ab.eager_s, ab.candidate_s
    row.checks["ab_rounds"], row.checks["calls_per_block"] = ab.rounds, ab.calls_per_block
    lo, hi = ab.interval
    rest = row.reason.split("; ")[1:]
    row.reason = "; ".join([f"{ab.speedup:.2f}x (95% interval {lo:.2f}-{hi:.2f}, "
                            f"{ab.rounds} A/B rounds), {why}", *rest])
    change = ab.change
    if change != "faster":
        row.status = "slower" if change == "slower" else "no significant change"


class NotTimedAgain(Exception):
    """The row could not be timed again; the message says why."""


class QuietCheck:
    """One search's record of what was timed beside the background compile.
    `compiling`: whether the child compiles now; `retime`: the A/B timing of a live
    candidate against eager (evaluate.time_ab), None where nothing can be timed again
    (the check then only marks rows)."""

    def __init__(self, compiling: Callable[[], bool], retime: Retime | None) -> None:
        self.compiling = compiling
        self.retime = retime
        self.beside: list[str] = []  # rows marked, in order
        self.timed_again: list[str] = []
        self.not_timed_again: str | None = None  # why the best was left as timed
        self.not_recaptured: str | None = None  # why the result holds no fresh capture
        self.live: Candidate | None = None  # after a settle: the row's candidate now

    def before(self) -> bool:
        """Call before a candidate runs; pass what it returns to `after`."""
        return self.compiling()

    def after(self, row: RemedyResult, compiling_before: bool) -> None:
        """Mark `row` when its timing may have overlapped the compile (it was running
        when the candidate started or still is); a row measured in the child is not."""
        if row.measured_speedup is None or row.checks.get("measured_in_child"):
            return
        if compiling_before or self.compiling():
            row.checks[BESIDE] = True
            self.beside.append(row.name)

    def settle(self, row: RemedyResult | None, cand: Candidate | None,
               deadline: float, say: Callable[[str], None]) -> bool:
        """Time the best live row again where it was timed beside a compile that has
        since ended; whether it was (its figures, reason and status then replaced)."""
        if (row is None or cand is None or self.retime is None
                or not row.checks.get(BESIDE) or row.checks.get(BESIDE_SPEEDUP)
                or self.compiling() or time.perf_counter() >= deadline):
            return False
        say(f"timing {row.name} again: its {row.measured_speedup or 0:.2f}x was timed "
            "while the background compile ran")
        try:
            ab, self.live = self.retime(row, cand)
        except OutOfTime:
            self.not_timed_again = (f"{row.name} was not timed again after the background "
                                    "compile: the --budget-s deadline came first")
            return False
        except NotTimedAgain as exc:
            self.not_timed_again = (f"{row.name} was not timed again after the background "
                                    f"compile: {exc}")
            return False
        first = row.measured_speedup or 0.0
        row.checks[BESIDE_SPEEDUP] = first
        row.checks["beside_compile_interval"] = list(row.interval) if row.interval else None
        _replace(row, ab, f"timed again once the background compile had ended ({first:.2f}x "
                          "while it compiled)")
        self.timed_again.append(row.name)
        say(f"  -> {ab.speedup:.2f}x with the compile ended (was {first:.2f}x)")
        return True

    def recapture(self, row: RemedyResult, cand: Candidate,
                  say: Callable[[str], None]) -> Candidate | None:
        """The result's live row, whose candidate holds a CUDA graph captured before a
        compile ran in this process (`captured_before_compile`), captured again and timed
        (its figures replaced; the first kept in `checks["before_recapture_speedup"]`):
        the result's callable must not replay the old graph (session ac's illegal memory
        access). The candidate that holds the row now, or None where the fresh capture
        failed or is no longer faster: the result then holds no remedy of it."""
        assert self.retime is not None
        say(f"capturing {row.name} again: its CUDA graph was captured before this process "
            "compiled a candidate, and the result must not replay it")
        first = row.measured_speedup or 0.0
        try:
            ab, fresh = self.retime(row, cand)
        except (OutOfTime, NotTimedAgain) as exc:
            self.not_recaptured = (f"{row.name}'s CUDA graph, captured before this "
                                   f"process compiled, could not be captured again ({exc}): "
                                   "the optimized callable does not hold it")
            return None
        row.checks["before_recapture_speedup"] = first
        _replace(row, ab, f"captured again after this process compiled ({first:.2f}x "
                          "before)")
        say(f"  -> {ab.speedup:.2f}x captured again (was {first:.2f}x)")
        return fresh if row.status == "verified" else None

    def settle_runner_up(self, best: RemedyResult, runner: RemedyResult,
                         cand: Candidate, deadline: float,
                         say: Callable[[str], None]) -> Candidate | None:
        """Once the best was timed again (`settle`): the runner-up timed again too where
        its figure is above the best's quiet one, and the candidate that holds it where
        it is then the faster verified row (None: the best stays)."""
        quiet_best = (best.measured_speedup or 0.0) if best.status == "verified" else 0.0
        if (runner.measured_speedup or 0.0) <= quiet_best:
            return None
        if not runner.checks.get(BESIDE) or runner.checks.get(BESIDE_SPEEDUP) is not None:
            return cand  # timed quiet (first or again): comparable as it is
        kept = self.live
        try:
            if not self.settle(runner, cand, deadline, say):
                return None
            now = self.live
        finally:
            self.live = kept
        if runner.status != "verified" or (runner.measured_speedup or 0.0) <= quiet_best:
            return None
        return now

    def notes(self) -> list[str]:
        """What the report says about the rows timed beside the compile."""
        out: list[str] = []
        left = [n for n in self.beside if n not in self.timed_again]
        if self.timed_again:
            out.append(f"timed again once the background compile had ended: "
                       f"{', '.join(self.timed_again)} (its first figure, timed while the "
                       "compile ran, is kept beside it: the compile's workers slow the "
                       "host, so a call the host bounds ran slower then)")
        if left:
            out.append(f"timed while the background compile ran and not again: "
                       f"{', '.join(left)} (where eager is host-bound their ratios may be "
                       "high)")
        if self.not_timed_again:
            out.append(self.not_timed_again)
        if self.not_recaptured:
            out.append(self.not_recaptured)
        return out

