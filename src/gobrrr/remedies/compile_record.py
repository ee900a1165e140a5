"""This machine's record of the compiles optimize measured (issue 24, item 1): each
search's first measured compile is kept (its graph's size in ops, its mode's factor, its
seconds, what was estimated for it), and the next search's first estimate scales the
nearest one in size instead of the prior constants (plan.COMPILE_BASE_S + ops x
COMPILE_PER_OP_S), which missed both ways (on the H200 109 s estimated for compiles that
took 24-35 s; on this CPU 76.5 s for 28.5 s).

One JSON file per machine and software stack (hardware.fingerprint: another torch, another
record), beside the ceilings in the cache folder; the newest MAX_ENTRIES entries. An
Inductor cache already warm makes a compile faster than a cold one: the record holds
what this machine saw, and the runner prints each measured compile against its estimate.
"""

from __future__ import annotations

import datetime as _dt
import math
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

__all__ = ["RecordedCompile", "nearest", "record", "record_path", "MAX_ENTRIES"]

SCHEMA = 1
MAX_ENTRIES = 50


@dataclass(frozen=True)
class RecordedCompile:
    n_ops: int
    factor: float  # its mode's factor (plan.compile_factor): seconds / factor compare
    seconds: float
    estimate_s: float | None  # what the search estimated for it
    mode: str
    at: str

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def record_path(device: str) -> Path:
    from gobrrr.hardware import cache_dir, fingerprint, machine_key

    return cache_dir() / f"compiles-{device}-{machine_key(fingerprint(device))}.json"


def _entries(path: Path) -> list[RecordedCompile]:
    from gobrrr.hardware import read_cache

    data = read_cache(path, SCHEMA, [])
    out = []
    for e in (data or {}).get("entries", []):
        try:
            r = RecordedCompile(int(e["n_ops"]), float(e["factor"]), float(e["seconds"]),
                                None if e.get("estimate_s") is None else float(e["estimate_s"]),
                                str(e["mode"]), str(e["at"]))
        except (KeyError, TypeError, ValueError):
            continue  # a damaged entry is left out, the others are kept
        if r.n_ops > 0 and r.factor > 0 and math.isfinite(r.seconds) and r.seconds > 0:
            out.append(r)
    return out


def nearest(device: str, n_ops: int) -> RecordedCompile | None:
    """The recorded compile nearest `n_ops` in size (by ratio; the newest on a tie)."""
    got = _entries(record_path(device))
    if not got or n_ops <= 0:
        return None
    return min(reversed(got), key=lambda r: abs(math.log(r.n_ops / n_ops)))


def record(device: str, n_ops: int, factor: float, seconds: float, mode: str,
           estimate_s: float | None) -> None:
    """Add one measured compile (the file rewritten whole; unwritable: not kept)."""
    from gobrrr.hardware import write_cache

    if n_ops <= 0 or not (seconds > 0 and math.isfinite(seconds)):
        return
    path = record_path(device)
    at = _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")
    entries = [*_entries(path), RecordedCompile(n_ops, factor, seconds, estimate_s, mode, at)]
    write_cache(path, {"schema_version": SCHEMA,
                       "entries": [e.to_dict() for e in entries[-MAX_ENTRIES:]]}, [])
