"""What the search's notes say about its own measurements, once it has ended: a faster
row it let go (`faster_unheld`), and eager's time moving under the ratios
(`eager_drift`). Each returns a sentence, or None where there is nothing to say."""

from __future__ import annotations

from collections.abc import Sequence

from gobrrr.remedies.base import RemedyResult
from gobrrr.remedies.prediction_record import CHECKED
from gobrrr.remedies.quiet import BESIDE, BESIDE_SPEEDUP
from gobrrr.units import fmt_s

__all__ = ["faster_unheld", "eager_drift", "EAGER_DRIFT"]

# eager's slowest A/B time per call over its fastest, across the rows of one run, above
# which the notes say the ratios moved with eager. An A/B timing's eager moves a few
# percent between rows of a quiet run (load, clocks); on an H100 (session ae,
# benchmarks/pool_spinup.py) GPT-2 1x1's host-bound eager call switched between ~4.5 and
# ~8.5 ms for seconds at a time, and one graph stack read 9.58x, 14.24x and 11.02x.
EAGER_DRIFT = 1.3


def faster_unheld(results: Sequence[RemedyResult], best: RemedyResult | None
                  ) -> str | None:
    """A sentence where a verified row measured faster than the result's best earlier in
    the run, and its candidate was let go (the search holds the best one and, while the
    best waits to be timed again, a runner-up): the best fell below it when timed again
    or captured again. On an H100 (session ae) GPT-2 1x1's graph stack read 14.24x timed
    again and 11.02x captured again, below the compile stack's 12.59x measured before,
    and the report did not say so. None where the best is the fastest."""
    if best is None or not best.measured_speedup:
        return None
    # a row timed beside the compile and not again may read high: not a fair rival
    faster = [r for r in results if r.status == "verified" and r is not best
              and (r.measured_speedup or 0.0) > best.measured_speedup
              and (not r.checks.get(BESIDE) or r.checks.get(BESIDE_SPEEDUP) is not None)]
    if not faster:
        return None
    top = max(faster, key=lambda r: r.measured_speedup or 0.0)
    both = dict.fromkeys(top.name.split("+") + best.name.split("+"))
    return (f"{top.name} measured {top.measured_speedup:.2f}x earlier in this run, above "
            f"the result's {best.name} at {best.measured_speedup:.2f}x, which fell when "
            f"timed again; {top.name}'s candidate was not kept (one live candidate is held, "
            "two while the best waits to be timed again): to compare the two at one "
            f"sitting, run optimize again with --only {','.join(both)}")


def eager_drift(results: Sequence[RemedyResult]) -> str | None:
    """A sentence where eager's time per call, timed beside each candidate (the A/B
    timer's other side), moved by more than EAGER_DRIFT across the run: each ratio is
    right for its moment, but a candidate the GPU bounds reads a ratio that moves with
    eager's host, so rows timed apart compare with that much doubt."""
    timed = [r for r in results if r.status in CHECKED and r.eager_s and r.eager_s > 0]
    if len(timed) < 2:
        return None
    fast = min(timed, key=lambda r: r.eager_s or 0.0)
    slow = max(timed, key=lambda r: r.eager_s or 0.0)
    assert fast.eager_s is not None and slow.eager_s is not None
    spread = slow.eager_s / fast.eager_s
    if spread <= EAGER_DRIFT:
        return None
    return (f"eager's own time per call moved {spread:.2f}x across this run's A/B timings "
            f"({fmt_s(fast.eager_s)} beside {fast.name}, {fmt_s(slow.eager_s)} beside "
            f"{slow.name}): each ratio is against eager timed beside it, so a candidate "
            "whose time the GPU bounds reads a ratio that moves with eager's host; rows "
            "timed apart compare with that doubt")
