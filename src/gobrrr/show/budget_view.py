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
- `verdict_headline`: the verdict's regime and share, with its range over the run's
  timing spread and both regimes when they overlap (report 1.9), else as before.
- `agreement_tone`: "agree", "disagree" or "none" (nothing checked the budget): the
  one mapping both renderers colour by, so green is only ever an agreement (issue 25).
- `above_roof`: a row faster than its roofline allows (fraction over 1).
- `cause_text`: why a flagged row is below its roof: its cause, or, where the budget
  found none ("unknown"), the row marked unexplained with its regime and achieved rate.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from gobrrr.units import fmt_bytes_per_s, fmt_flops

__all__ = ["budget_parts", "phase_rows", "roof_band", "verdict_headline", "agreement_tone",
           "above_roof", "cause_text", "MODULES_TITLE", "OP_CALLS", "UNEXPLAINED",
           "UNEXPLAINED_NOTE"]


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


def verdict_headline(v: Mapping[str, Any],
                     mark: Callable[[str, str], str] = lambda text, _regime: text) -> str:
    """"OVERHEAD-BOUND: 55% (52-58%)" ("OVERHEAD-BOUND as traced (an upper bound): ..."
    for analyze's verdict.as_traced), or, when the runner-up's range overlaps (report
    1.9: verdict.uncertain), both: "OVERHEAD- OR COMPUTE-BOUND: overhead 48-61% vs
    compute 35-50% ..."; a report before 1.9: "OVERHEAD-BOUND: 55%". `mark(text,
    regime)` styles a regime's name (the terminal's colour)."""
    regime, lo_hi = v["regime"], v.get("share_range")

    def pct(r: Sequence[float]) -> str:
        lo, hi = round(100 * r[0]), round(100 * r[1])
        return f"{lo}%" if lo == hi else f"{lo}-{hi}%"

    other, other_range = v.get("runner_up"), v.get("runner_up_range")
    traced = " as traced (an upper bound)" if v.get("as_traced") else ""
    if v.get("uncertain") and other and lo_hi and other_range:
        why = ("on a contended CPU: other processes held cores torch's threads needed"
               if v.get("contended") else
               "within this run's timing spread"
               + (" and its CPU load" if v.get("wall_factor") else ""))
        return (f"{mark(regime.upper() + '-', regime)} OR "
                f"{mark(other.upper() + '-BOUND', other)}{traced}: {regime} {pct(lo_hi)} vs "
                f"{other} {pct(other_range)} ({why})")
    share = f"{round(100 * v['share'])}%"
    spread = f" ({pct(lo_hi)})" if lo_hi and pct(lo_hi) != share else ""
    return f"{mark(regime.upper() + '-BOUND', regime)}{traced}: {share}{spread}"


def agreement_tone(v: Mapping[str, Any]) -> str:
    """"agree" when experiments checked the budget and agree, "disagree" when one does
    not, else "none" ("no experiment could check the budget", or a check that is within
    noise): never good news, so never green. Read off verdict.agreement, the sentence
    the reader sees (verdict.py writes it)."""
    text = v.get("agreement") or ""
    if text.startswith("experiments DISAGREE"):
        return "disagree"
    return "agree" if text.startswith("experiments agree") else "none"


def above_roof(row: Mapping[str, Any]) -> bool:
    """Faster than its roofline floor (fraction over 1: 545% of roof). Not an error to
    hide: on a CPU, data served from cache beats the DRAM bandwidth the roof is measured
    at; elsewhere a time measured short."""
    frac = row.get("roofline_fraction")
    return frac is not None and frac > 1


# A module's, phase's or op class's "calls" are the calls of the ops it holds (a Linear
# run once reads 2: its t and its addmm), so its tables say so.
OP_CALLS = "op calls"

# Module rows are exclusive (budget.py: each op goes to its innermost module), so a block
# can read 33.6 us above a child of 440 ms (issue 25): the title says so, in both views.
MODULES_TITLE = ("top modules (exclusive: self time, without their children's; each op in "
                 "its innermost module)")

UNEXPLAINED = "unexplained"
UNEXPLAINED_NOTE = ("unexplained: no cause the budget checks fits (instruction-bound math, "
                    "non-GEMM kernels, small calls, datasheet roofs); layouts, cache misses "
                    "and other processes are not recorded, so none is guessed")


def cause_text(row: Mapping[str, Any]) -> str:
    """A flagged row's why: its reason (instruction-bound arithmetic) or likely cause
    (budget.likely_cause); when the budget found none ("unknown", or no key), "unexplained"
    with what is known: its regime and achieved rate (both renderers show its share of
    its roof beside it; UNEXPLAINED_NOTE says what was checked). Never a guessed cause."""
    known = row.get("reason") or row.get("cause")
    if known and known != "unknown":
        return str(known)
    if row.get("bound") == "compute" and row.get("achieved_flops_per_s"):
        rate = f"compute-bound at {fmt_flops(row['achieved_flops_per_s'])}"
    elif row.get("bound") == "memory" and row.get("achieved_bytes_per_s"):
        rate = f"memory-bound at {fmt_bytes_per_s(row['achieved_bytes_per_s'])}"
    else:
        rate = f"{row.get('bound') or 'no'} bound"
    return f"{UNEXPLAINED}: {rate}"
