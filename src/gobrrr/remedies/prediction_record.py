"""How far optimize's predictions have been off, by kind (issue 24, item 4): what the
report says beside each measured candidate's predicted and measured speedups.

A prediction's error is measured / predicted (1.0: exact; 0.5: it promised twice what
came). Candidates are grouped by what their prediction rests on (`kind_of`):

- "compiled": a stack with a torch.compile mode (fusion, and CUDA graphs where the mode
  captures): the prediction credits the fusion from the bytes of intermediates;
- "CUDA graph": captured without compiling: the graph-replay experiment's measured replay;
- "precision": bf16 or TF32 in eager: the workload's own GEMM shapes timed in each format;
- "eager": flags and swaps in eager (inference mode, fused optimizers, channels_last...):
  the dispatch and memory savings of the budget.

Two records:
- the validation suite's, committed: `prediction_record.json` beside this module, written
  by `benchmarks/prediction_table.py` from the optimize rows of the newest nine-model
  table (session al's, on an H100: `benchmarks/results/h100/session-2026-12-06al/`,
  `optimize-budget60.md`; the whole table in `prediction-vs-measured.md`; the JSON's
  "source" names it). It stands for CUDA runs; on a CPU there is none.
- this machine's: every measured candidate of every optimize run, one JSON file per
  machine and software stack in the cache folder (as compile_record.py keeps compiles),
  read before this run's candidates are added, so it says how earlier runs fared.
"""

from __future__ import annotations

import datetime as _dt
import json
import math
import statistics
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass
from importlib import resources
from pathlib import Path
from typing import Any

__all__ = ["KINDS", "WITHIN", "ErrorSummary", "kind_of", "summarize", "validation",
           "machine", "record", "record_path", "checked", "lines", "for_run", "MAX_ENTRIES"]

KINDS = ("compiled", "CUDA graph", "precision", "eager")
WITHIN = 1.5  # a prediction within this factor of the measured speedup, either way
SCHEMA = 1
MAX_ENTRIES = 400  # this machine's newest measured candidates
VALIDATION_FILE = "prediction_record.json"
# statuses whose measured speedup checks the prediction (outputs verified, timed A/B)
CHECKED = ("verified", "no significant change", "slower")


@dataclass(frozen=True)
class ErrorSummary:
    """measured / predicted over `n` candidates."""

    n: int
    within: int  # of them within WITHIN either way
    low: float
    median: float
    high: float

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def text(self) -> str:
        if self.n == 1:
            return f"1 measured: {self.median:.2f}x of its prediction"
        if f"{self.low:.2f}" == f"{self.high:.2f}":
            return (f"{self.n} measured: each {self.median:.2f}x of predicted; "
                    f"{self.within} of {self.n} within {WITHIN:g}x")
        return (f"{self.n} measured: {self.low:.2f}-{self.high:.2f}x of predicted, median "
                f"{self.median:.2f}x; {self.within} of {self.n} within {WITHIN:g}x")


def kind_of(components: Sequence[str]) -> str:
    """The kind of a candidate's prediction (module docstring), from its remedies."""
    from gobrrr.remedies import catalog
    from gobrrr.remedies.base import PREP_COMPILE

    specs = {s.name: s for s in catalog.select(None)}
    parts = [specs[n] for n in components if n in specs]
    if any(s.prep == PREP_COMPILE for s in parts):
        return "compiled"
    if any(s.prep == "capture" for s in parts):
        return "CUDA graph"
    if any(s.group == "precision" for s in parts):
        return "precision"
    return "eager"


def _ratio(predicted: Any, measured: Any) -> float | None:
    ok = all(isinstance(v, (int, float)) and math.isfinite(v) and v > 0
             for v in (predicted, measured))
    return float(measured) / float(predicted) if ok else None


def summarize(ratios: Iterable[float]) -> ErrorSummary | None:
    """The summary of measured / predicted ratios; None for none."""
    got = sorted(ratios)
    if not got:
        return None
    within = sum(1 / WITHIN <= r <= WITHIN for r in got)
    return ErrorSummary(len(got), within, got[0], statistics.median(got), got[-1])


def checked(rows: Iterable[dict[str, Any]]) -> list[tuple[str, str, float]]:
    """(kind, name, measured / predicted) of the rows (RemedyResult.to_dict() shape) whose
    prediction a measurement checked."""
    out = []
    for r in rows:
        ratio = _ratio(r.get("predicted_speedup"), r.get("measured_speedup"))
        if r.get("status") in CHECKED and ratio is not None:
            comps = r.get("components") or str(r["name"]).split("+")
            out.append((kind_of(comps), str(r["name"]), ratio))
    return out


def validation(device: str) -> tuple[dict[str, ErrorSummary], str] | None:
    """The validation suite's summaries by kind and where they come from; None where
    there is none for `device` (the committed suite ran on CUDA)."""
    try:
        data = json.loads(resources.files("gobrrr.remedies").joinpath(VALIDATION_FILE)
                          .read_text())
        if data.get("device") != device:
            return None
        kinds = {k: ErrorSummary(**v) for k, v in data["kinds"].items()}
        return kinds, str(data["source"])
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None  # an installation without it (or a damaged one): no suite to cite


def record_path(device: str) -> Path:
    from gobrrr.hardware import cache_dir, fingerprint, machine_key

    return cache_dir() / f"predictions-{device}-{machine_key(fingerprint(device))}.json"


def _entries(path: Path) -> list[dict[str, Any]]:
    from gobrrr.hardware import read_cache

    data = read_cache(path, SCHEMA, [])
    out = []
    for e in (data or {}).get("entries", []):
        try:
            kind, ratio = str(e["kind"]), float(e["ratio"])
        except (KeyError, TypeError, ValueError):
            continue  # a damaged entry is left out, the others are kept
        if kind in KINDS and math.isfinite(ratio) and ratio > 0:
            out.append(e)
    return out


def machine(device: str) -> dict[str, ErrorSummary]:
    """This machine's record (module docstring), summarized by kind."""
    by_kind: dict[str, list[float]] = {}
    for e in _entries(record_path(device)):
        by_kind.setdefault(e["kind"], []).append(float(e["ratio"]))
    return {k: s for k, v in by_kind.items() if (s := summarize(v)) is not None}


def record(device: str, workload: str, found: list[tuple[str, str, float]]) -> None:
    """Add this run's checked predictions (`checked`) to this machine's record (the file
    rewritten whole; unwritable: not kept)."""
    from gobrrr.hardware import write_cache

    if not found:
        return
    path = record_path(device)
    at = _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")
    entries = _entries(path) + [{"kind": k, "name": n, "ratio": r, "workload": workload,
                                 "at": at} for k, n, r in found]
    write_cache(path, {"schema_version": SCHEMA, "entries": entries[-MAX_ENTRIES:]}, [])


def lines(device: str, found: list[tuple[str, str, float]],
          earlier: dict[str, ErrorSummary]) -> list[dict[str, Any]]:
    """For each kind among this run's checked predictions: this run's, the validation
    suite's and this machine's earlier runs' errors (None where there are none)."""
    suite = validation(device)
    out = []
    for kind in KINDS:
        here = summarize(r for k, _, r in found if k == kind)
        if here is None:
            continue
        valid = suite[0].get(kind) if suite else None
        mine = earlier.get(kind)
        out.append({"kind": kind, "this_run": here.to_dict(),
                    "validation": None if valid is None else valid.to_dict(),
                    "validation_source": suite[1] if suite and valid else None,
                    "this_machine": None if mine is None else mine.to_dict()})
    return out


def for_run(device: str, workload: str, rows: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """What the report says about this run's predictions (`lines`), this machine's
    record read first, then this run's checked predictions added to it."""
    found = checked(rows)
    out = lines(device, found, machine(device))
    record(device, workload, found)
    return out
