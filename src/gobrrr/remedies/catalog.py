"""The remedy catalog: one list of RemedySpecs, the single-process remedies first, then
those of a torchrun job (DDP: ddp.py, FSDP2: fsdp.py), which apply only where the
diagnosis found that job's communication (Context.comm), then the input pipeline's
(data.py), which apply only where a DataLoader was seen (Context.loaders). The search
(plan.py) orders the remedies by cost class and predicted gain; the catalog order breaks
ties and orders a run without predictions (--no-diagnose): cheap switches first, the
slow compiles last.

`predictions` is the doctor report's list (every remedy that applies, single-process or
distributed); `select` picks the remedies a search tries: one process tries the
single-process ones, a torchrun job its wrapper's (dist/optimize.py)."""

from __future__ import annotations

from gobrrr.errors import UserError
from gobrrr.gains import Gain, predicted_loss
from gobrrr.remedies import (
    attention,
    batch,
    compiled,
    cudnn,
    data,
    ddp,
    fsdp,
    grad,
    graphs,
    layout,
    optim,
    precision,
)
from gobrrr.remedies.base import Context, RemedySpec

__all__ = ["ALL", "SINGLE", "DISTRIBUTED", "INPUT", "names", "select", "by_name", "predictions",
           "predicted_slower"]

SINGLE: list[RemedySpec] = [
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
DISTRIBUTED: list[RemedySpec] = [*ddp.SPECS, *fsdp.SPECS]
# The input pipeline's (data.py): advice for a script's own DataLoader, which no search
# rebuilds; they apply only where a DataLoader was seen (Context.loaders)
INPUT: list[RemedySpec] = list(data.SPECS)
ALL: list[RemedySpec] = [*SINGLE, *DISTRIBUTED, *INPUT]


def names(pool: list[RemedySpec] | None = None) -> list[str]:
    return [s.name for s in (SINGLE if pool is None else pool)]


def by_name() -> dict[str, RemedySpec]:
    return {s.name: s for s in ALL}


def _families(pool: list[RemedySpec]) -> list[str]:
    return list(dict.fromkeys(s.family for s in pool))


def select(only: list[str] | None, pool: list[RemedySpec] | None = None,
           what: str = "remedy") -> list[RemedySpec]:
    """The remedies of `pool` (default: the single-process ones), or the named ones (a
    name, a family, or for the distributed ones a group such as "bucket")."""
    pool = SINGLE if pool is None else pool
    if not only:
        return list(pool)
    wanted = [n.strip() for item in only for n in item.split(",") if n.strip()]
    choices = (f"choose from {', '.join(names(pool))} (or a family: "
               f"{' '.join(_families(pool))})")
    if not wanted:  # "--only ," or "--only ''": trying nothing is never what was meant
        raise UserError(f"--only {','.join(only)!r} names no {what}; {choices}")
    out: list[RemedySpec] = []
    for n in wanted:
        hits = [s for s in pool if n in (s.name, s.family)
                or (s.settings is not None and n == s.group)]
        if not hits:
            raise UserError(f"unknown {what} {n!r}; {choices}")
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


def predicted_slower(ctx: Context) -> list[tuple[RemedySpec, float, Gain]]:
    """Every remedy that applies and that the budget predicts to add more time than it
    removes (a compiled call's host work on a CPU call of a few microsecond ops): (spec,
    the predicted speedup, under 1, its gain). Not among `predictions`: the doctor says
    why it is not listed rather than offering it."""
    out = []
    for spec in ALL:
        if spec.applies(ctx) is None:
            gain = spec.predict(ctx)
            loss = predicted_loss(ctx.budget, gain)
            if loss is not None:
                out.append((spec, loss, gain))
    return out
