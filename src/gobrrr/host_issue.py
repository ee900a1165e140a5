"""The host's issue time of one CUDA call: how long the host takes to launch a call's
work, apart from the GPU's time to run it.

On CUDA the host issues a call's kernels while the GPU runs those already issued, so a
call takes max(the host's issue time, the GPU's time) plus what does not overlap. The
budget splits T_wall into GPU time and GPU idle, which says nothing of how much host work
the GPU time hid: a GPU-bound call whose host issues it in 44% of T_wall cannot become
more than ~2.3x faster by faster kernels alone (BERT-base in bf16 on the H200: 2.28x
measured, 6.67x predicted from the kernels), however fast they get.

Measured with the GPU held busy: a sleep kernel of HOLD_FACTOR x T_wall goes first, then
the call is timed from its start to its return, then synchronized. While the GPU sleeps
none of the call's kernels can run, so nothing the host does waits for them: the time is
the host's own, unless the call waits for the GPU (a `.item()`, a copy to the host, or
more launches than the launch queue holds), in which case it waits out the sleep too and
takes more than BLOCKED_SHARE of it. Such a call is then timed with the GPU running, from
its start to its return: where it returns well before its own kernels are done (under
BLOCKED_SHARE of T_wall), it did not wait for them at its end, and that time is its issue
time, an upper bound where it waited for some of them on the way (said in the note). On
the H200 GPT-2 8x512 waited under the hold (66 ms of a 58 ms hold: transformers checks
its attention mask on the host at the start of the call) and returned in 9.0 ms of its
28.9 ms with the GPU running. A call that returns only with its kernels done (a
`.item()` of the result) gets no issue time (None), and the note says why: its host work
cannot be told apart from the wait.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

__all__ = ["HostIssue", "measure_host_issue", "cuda_hold", "HOLD_FACTOR", "BLOCKED_SHARE",
           "SAMPLES", "MIN_HOLD_S"]

HOLD_FACTOR = 2.0  # the GPU is held for this many T_wall before each timed call
MIN_HOLD_S = 1e-3  # a hold long enough to see a wait on it against the host clock
# A call that takes more than this share of the hold waited for the GPU: a call that did
# not wait issues in about T_wall at most (the host-bound case), half the hold.
BLOCKED_SHARE = 0.8
SAMPLES = 5


@dataclass(frozen=True)
class HostIssue:
    issue_s: float | None  # median over the samples; None: not measured (note says why)
    hold_s: float
    samples_s: tuple[float, ...] = ()
    note: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"issue_s": self.issue_s, "hold_s": self.hold_s,
                "samples_s": list(self.samples_s), "note": self.note}


def measure_host_issue(fn: Callable[[], Any], wall_s: float, time_budget_s: float,
                       hold: Callable[[float], None], sync: Callable[[], None],
                       clock: Callable[[], float] = time.perf_counter) -> HostIssue:
    """The host's issue time of `fn()` (module docstring): SAMPLES calls, fewer when
    each (held + the call, about 3 x `wall_s`) would not fit `time_budget_s`, one at
    least; `hold(seconds)` keeps the GPU busy that long, `sync()` waits for it."""
    hold_s = max(MIN_HOLD_S, HOLD_FACTOR * wall_s)
    each_s = hold_s + wall_s
    n = max(1, min(SAMPLES, int(time_budget_s // each_s)))
    got = []
    for _ in range(n):
        sync()
        hold(hold_s)
        t0 = clock()
        fn()
        got.append(clock() - t0)
        sync()
    issue_s = statistics.median(got)
    if issue_s <= BLOCKED_SHARE * hold_s:
        return HostIssue(issue_s, hold_s, tuple(got))
    held = (f"the call waited for the GPU while it was held busy ({issue_s * 1e3:.3g} ms "
            f"of a {hold_s * 1e3:.3g} ms hold): a .item(), a copy to the host or more "
            "launches than the queue holds")
    running = []
    for _ in range(n):
        sync()
        t0 = clock()
        fn()
        running.append(clock() - t0)
        sync()
    returned_s = statistics.median(running)
    if returned_s < BLOCKED_SHARE * wall_s:
        return HostIssue(returned_s, hold_s, tuple(running), (
            f"{held}; timed with the GPU running instead, it returned in "
            f"{returned_s * 1e3:.3g} ms of its {wall_s * 1e3:.3g} ms, before its kernels "
            "were done: that is its issue time, an upper bound if it waited for some of "
            "them on the way"))
    return HostIssue(None, hold_s, tuple(got), (
        f"{held}, and with the GPU running it returned only with its kernels done "
        f"({returned_s * 1e3:.3g} ms of its {wall_s * 1e3:.3g} ms); its host work cannot "
        "be told apart from the wait, so no prediction is floored by it"))


def cuda_hold() -> Callable[[float], None] | None:
    """A function that keeps the current CUDA stream busy for about `seconds`
    (torch.cuda._sleep, its cycles per second measured here once); None where this torch
    has no sleep kernel."""
    import torch

    sleep = getattr(torch.cuda, "_sleep", None)
    if sleep is None:
        return None
    cycles = 1_000_000
    sleep(cycles)  # the first launch carries one-time costs
    start = torch.cuda.Event(enable_timing=True)
    end = torch.cuda.Event(enable_timing=True)
    start.record()
    sleep(cycles)
    end.record()
    end.synchronize()
    per_s = cycles / max(start.elapsed_time(end) / 1e3, 1e-9)
    return lambda seconds: sleep(int(seconds * per_s))
