"""What the search's notes say about its own measurements, once it has ended: a faster
row it let go (`faster_unheld`), and eager's time moving under the ratios
(`eager_drift`). Each returns a sentence, or None where there is nothing to say."""

from __future__ import annotations

import statistics
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


def eager_drift(results: Sequence[RemedyResult], diagnosed_s: float | None = None,
                best: RemedyResult | None = None) -> str | None:
    """A sentence where eager's time per call, timed beside each candidate (the A/B
    timer's other side), moved by more than EAGER_DRIFT across the run, or stood that far
    from the diagnosis's (`diagnosed_s`, what every prediction is a ratio against): each
    measured ratio is right for its moment, but a candidate the GPU bounds reads a ratio
    that moves with eager's host, so rows timed apart, and a prediction against its
    measurement, compare with that much doubt. On an H100 (session ag) GPT-2 1x1's
    diagnosis timed eager at 9.34 ms and its graph replay at 855 us (10.92x predicted);
    beside the candidate eager read 6.96 ms, and the replay measured 8.14x. With the
    result's `best`, it also gives the best's own time per call against the median of
    eager's A/B times (and the diagnosis's): on an H100 (session ak) ResNet-50 b1's
    winner measured 9.95x against eager timed beside it at 8.84 ms, where the run's
    other rows timed eager at 4.84-6.91 ms and the diagnosis at 4.91 ms."""
    timed = [r for r in results if r.status in CHECKED and r.eager_s and r.eager_s > 0]
    if not timed or (len(timed) < 2 and not diagnosed_s):
        return None
    fast = min(timed, key=lambda r: r.eager_s or 0.0)
    slow = max(timed, key=lambda r: r.eager_s or 0.0)
    assert fast.eager_s is not None and slow.eager_s is not None
    spread = slow.eager_s / fast.eager_s
    low, high = fast.eager_s, slow.eager_s
    if diagnosed_s:
        low, high = min(low, diagnosed_s), max(high, diagnosed_s)
    if high / low <= EAGER_DRIFT:
        return None
    beside = (f"{fmt_s(fast.eager_s)} beside {fast.name}" if fast is slow else
              f"{fmt_s(fast.eager_s)} beside {fast.name}, {fmt_s(slow.eager_s)} beside "
              f"{slow.name}")
    moved = (f"eager's own time per call moved {spread:.2f}x across this run's A/B timings "
             f"({beside})" if spread > EAGER_DRIFT else
             f"eager's own time per call in this run's A/B timings ({beside})")
    against = ("" if not diagnosed_s else
               f"; the diagnosis timed it at {fmt_s(diagnosed_s)}, and every predicted "
               "speedup is a ratio against that")
    return (f"{moved}{against}: each ratio is against eager timed beside it, so a "
            "candidate whose own time did not move with eager's (one the device bounds) "
            "reads a ratio that moves with it; rows timed apart, and a prediction against "
            f"its measurement, compare with that doubt{_best_against(timed, diagnosed_s, best)}")


def _best_against(timed: Sequence[RemedyResult], diagnosed_s: float | None,
                  best: RemedyResult | None) -> str:
    """The sentence of `eager_drift` that puts the best's time per call against the
    median of eager's A/B times and the diagnosis's ("" without the best's times)."""
    if best is None or not best.candidate_s or not best.eager_s \
            or not best.measured_speedup:
        return ""
    median_s = statistics.median(r.eager_s or 0.0 for r in timed)
    diag = ("" if not diagnosed_s else
            f", {diagnosed_s / best.candidate_s:.2f}x against the diagnosis's")
    return (f". {best.name} takes {fmt_s(best.candidate_s)} a call: "
            f"{best.measured_speedup:.2f}x against eager timed beside it "
            f"({fmt_s(best.eager_s)}), {median_s / best.candidate_s:.2f}x against the "
            f"median of eager's A/B times ({fmt_s(median_s)}){diag}")
