"""The remedy catalog, in the order they are tried (cheapest and most general first;
the slow compiles last so a tight --budget-s still covers the rest)."""

from __future__ import annotations

from gobrrr.errors import UserError
from gobrrr.remedies import attention, batch, compiled, graphs, layout, optim, precision
from gobrrr.remedies.base import RemedySpec

__all__ = ["ALL", "names", "select"]

ALL: list[RemedySpec] = [
    *precision.SPECS,
    layout.SPEC,
    *optim.SPECS,
    graphs.SPEC,
    *compiled.SPECS,
    attention.SPEC,
    batch.SPEC,
]


def names() -> list[str]:
    return [s.name for s in ALL]


def _families() -> list[str]:
    return list(dict.fromkeys(s.family for s in ALL))


def select(only: list[str] | None) -> list[RemedySpec]:
    """The catalog, or the named remedies (a family name selects its members)."""
    if not only:
        return list(ALL)
    wanted = [n.strip() for item in only for n in item.split(",") if n.strip()]
    if not wanted:  # "--only ," or "--only ''": trying nothing is never what was meant
        raise UserError(f"--only {','.join(only)!r} names no remedy; choose from "
                        f"{', '.join(names())} (or a family: {' '.join(_families())})")
    out: list[RemedySpec] = []
    for n in wanted:
        hits = [s for s in ALL if n in (s.name, s.family)]
        if not hits:
            raise UserError(f"unknown remedy {n!r}; choose from {', '.join(names())} "
                            f"(or a family: {' '.join(_families())})")
        out += [h for h in hits if h not in out]
    return out
