"""Ceilings that defend themselves (issue 25, item 3): an op measured above a roof says
the roof is wrong, most often a calibration taken under load (seen on this 2-core CPU:
fp32 read 35.7 GFLOP/s in one calibration and 178 in another, and reports then said an
op ran at 138% of the peak).

After a live diagnosis's budget (sources measured here: a callable, a script, a
generation), each op call of at least MIN_SHARE of T_wall that ran faster than its floor
by more than BEAT names the roof it beat: its unit's matmul peak (limit "flops") or the
bandwidth (limit "bytes", and only for an op that moved more than the last-level cache
holds: data already in a cache beats a DRAM roof by right). Each such roof is measured
again with calibrate's own probe (hardware.remeasure: the better of the two is kept, in
the cache too), at most once per process, and never again once a re-measure left it
where it was. Ceilings calibrate did not measure (a datasheet's, or made by hand:
calibrate_s 0) are left as they are. The budget is then made again with the new roofs,
and a note says what beat what and what the re-measure gave.
"""

from __future__ import annotations

from collections.abc import Callable

from gobrrr.budget import Budget
from gobrrr.counting import MATMUL_CLASSES, OpRecord
from gobrrr.hardware import BANDWIDTH, Ceilings, remeasure
from gobrrr.units import fmt_bytes_per_s, fmt_flops, fmt_pct

__all__ = ["beaten_roofs", "defend", "BEAT", "MIN_SHARE", "LIVE_SOURCES"]

BEAT = 1.10  # an op this much faster than its floor beat the roof (noise stays under it)
MIN_SHARE = 0.02  # of T_wall: smaller ops are not worth seconds of re-measuring
HELD = 1.02  # a re-measure that raised the roof by less than this left it where it was
LIVE_SOURCES = ("callable", "script", "generation")  # measured here, now
_DONE: set[tuple[str, str]] = set()  # (machine, roof) re-measured by this process


def _cache_bytes(ceil: Ceilings) -> int:
    """What the caches hold: the last-level cache (CPU, calibrate's details), the L2
    (CUDA, from the device)."""
    if ceil.device == "cuda":
        import torch

        return int(getattr(torch.cuda.get_device_properties(0), "L2_cache_size", 0))
    return int(ceil.details.get("llc_bytes", 0))


def beaten_roofs(budget: Budget, records: list[OpRecord], ceil: Ceilings
                 ) -> dict[str, tuple[str, float]]:
    """{roof: (the op that beat it by the most, its floor over its time)}."""
    by_index = {r.index: r for r in records}
    cached = _cache_bytes(ceil)
    out: dict[str, tuple[str, float]] = {}
    for c in budget.per_call:
        frac = c.roofline_fraction
        if frac is None or frac <= BEAT or c.time_s < MIN_SHARE * budget.total_s:
            continue
        if c.limit == "flops":
            rec = by_index.get(c.index)
            unit = rec.tensor_core_unit if rec is not None else None
            roof = (unit if c.op_class in MATMUL_CLASSES and unit in ceil.peak_flops_per_s
                    else "fp32")
        elif c.limit == "bytes" and c.bytes > cached:
            roof = BANDWIDTH
        else:
            continue
        if roof not in out or frac > out[roof][1]:
            out[roof] = (c.op, frac)
    return out


def _fmt(roof: str, value: float) -> str:
    return fmt_bytes_per_s(value) if roof == BANDWIDTH else fmt_flops(value)


def defend(budget: Budget, records: list[OpRecord], ceil: Ceilings,
           progress: Callable[[str], None] | None = None
           ) -> tuple[Ceilings, list[str]]:
    """(the ceilings, re-measured where an op beat them; the notes saying so)."""
    if ceil.source not in ("measured", "cache") or ceil.calibrate_s <= 0:
        return ceil, []  # a datasheet's, or made by hand (no calibrate run measured it)
    beaten = beaten_roofs(budget, records, ceil)
    machine = ceil.fingerprint.get("name", "")
    notes: list[str] = []
    todo: set[str] = set()
    for roof, (op, frac) in sorted(beaten.items()):
        before = ceil.details.get("remeasured", {}).get(roof)
        if (machine, roof) in _DONE or (before and before["after"] < HELD * before["before"]):
            notes.append(f"{op} ran at {fmt_pct(frac)} of the measured {roof} roof; it was "
                         "re-measured before and held: the op's count, or data in a cache, "
                         "is the likelier cause")
            continue
        todo.add(roof)
    if not todo:
        return ceil, notes
    new, changes = remeasure(ceil, todo, progress)
    for roof, (a, b) in sorted(changes.items()):
        _DONE.add((machine, roof))
        op, frac = beaten[roof]
        if b >= HELD * a:
            notes.append(f"{op} ran at {fmt_pct(frac)} of the measured {roof} roof "
                         f"({_fmt(roof, a)}): re-measured, {_fmt(roof, b)} (the calibration "
                         "read low: taken under load?); this budget and the cache use it")
        else:
            notes.append(f"{op} ran at {fmt_pct(frac)} of the measured {roof} roof "
                         f"({_fmt(roof, a)}); re-measured, it held ({_fmt(roof, b)}): the "
                         "op's count, or data in a cache, is the likelier cause")
    return new, notes


def defended(budget_of: Callable[[Ceilings], Budget], source: str, records: list[OpRecord],
             ceil: Ceilings, first: Budget) -> tuple[Budget, Ceilings, list[str]]:
    """The budget after `defend`, made again by `budget_of` when a roof moved."""
    if source not in LIVE_SOURCES:
        return first, ceil, []
    new, notes = defend(first, records, ceil)
    if new is ceil:
        return first, ceil, notes
    return budget_of(new), new, notes
