"""What every renderer shows of a report's budget dict (`Report.to_dict()["budget"]`),
read the same way whatever schema version saved it: the terminal and the HTML page both
call these, so a saved report renders alike in both and one rule has one place.

- `budget_parts`: T and its parts in seconds. The budget carries them (`total_s`,
  `parts_s`, budget.Budget); a report saved before those keys has only the parts' own
  keys, and its parts are the ones its `fractions` name (three, or four with
  communication), summed in that order as Budget.total_s sums them.
- `phase_rows`: the per-phase rows worth a table: none for a single phase (a forward-only
  call has nothing to read apart) or a report saved before `per_phase` existed.
- `roof_band`: a row's band under its roofline; reports before 1.5 have only
  `below_roof`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["budget_parts", "phase_rows", "roof_band"]


def budget_parts(budget: Mapping[str, Any]) -> tuple[float, dict[str, float]]:
    """(total_s, parts_s): T and its seconds per part, in the budget's order
    (overhead, memory, compute, then communication in distributed reports)."""
    if "parts_s" in budget:
        return float(budget["total_s"]), dict(budget["parts_s"])
    parts = {k: float(budget[f"{k}_s"]) for k in budget["fractions"]}
    return sum(parts.values()), parts


def phase_rows(budget: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The per-phase rows (budget.RowBudget dicts, longest first) when there are two
    phases or more; else none."""
    rows = list(budget.get("per_phase") or [])
    return rows if len(rows) > 1 else []


def roof_band(row: Mapping[str, Any]) -> str | None:
    """"<25%", "25-50%" or None (budget.roof_band), from a row dict of any version."""
    band: str | None = row.get("roof_band") or ("<25%" if row.get("below_roof") else None)
    return band
