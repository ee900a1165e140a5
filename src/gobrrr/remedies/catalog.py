"""The remedy catalog. The search (plan.py) orders the remedies by cost class and
predicted gain; the catalog order breaks ties and orders a run without predictions
(--no-diagnose): cheap switches first, the slow compiles last."""

from __future__ import annotations

from gobrrr.errors import UserError
from gobrrr.gains import Gain
from gobrrr.remedies import (
    attention,
    batch,
    compiled,
    cudnn,
    grad,
    graphs,
    layout,
    optim,
    precision,
)
from gobrrr.remedies.base import Context, RemedySpec

__all__ = ["ALL", "names", "select", "by_name", "predictions"]

ALL: list[RemedySpec] = [
    grad.SPEC,
    *precision.SPECS,
    cudnn.SPEC,
    layout.SPEC,
    *optim.SPECS,
    graphs.SPEC,
    *compiled.SPECS,
    attention.SPEC,
    batch.SPEC,
]


def names() -> list[str]:
    return [s.name for s in ALL]


def by_name() -> dict[str, RemedySpec]:
    return {s.name: s for s in ALL}


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


def predictions(ctx: Context) -> list[tuple[RemedySpec, Gain]]:
    """Every remedy that applies and for which the budget predicts a gain, with that
    gain, largest first: the doctor report's remedies (optimize predicts with the very
    same `spec.predict`)."""
    out = []
    for spec in ALL:
        if spec.applies(ctx) is None:
            gain = spec.predict(ctx)
            if gain.speedup is not None:
                out.append((spec, gain))
    out.sort(key=lambda sg: -(sg[1].speedup or 0.0))
    return out
