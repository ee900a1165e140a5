"""Is a workload's output finite? A NaN or inf in the output usually means the workload is
broken (a diverged loss, an uninitialised buffer), and timing a broken workload answers
the wrong question; doctor warns, optimize refuses to verify against such a reference.

Checked on one call's output only: `torch.isfinite(t).all()` over its floating tensors is
one pass over the output, cheap next to the call that made it. Elements are counted only
when something is not finite, to say where.
"""

from __future__ import annotations

import math
from typing import Any

__all__ = ["nonfinite_summary"]


def _tensor_problem(t: Any) -> str | None:
    """'3 NaN, 1 inf of 128 (float32 [8, 16])', or None when every element is finite."""
    import torch

    if not (t.is_floating_point() or t.is_complex()) or t.numel() == 0:
        return None
    if bool(torch.isfinite(t).all()):
        return None
    n_nan = int(torch.isnan(t).sum())
    n_inf = int(torch.isinf(t).sum())
    dtype = str(t.dtype).replace("torch.", "")
    return f"{n_nan} NaN, {n_inf} inf of {t.numel()} ({dtype} {list(t.shape)})"


def nonfinite_summary(out: Any) -> str | None:
    """None when every floating tensor and float in `out` (any pytree) is finite;
    otherwise where the NaN/inf are, e.g. "output[0]: 3 NaN, 0 inf of 128 (float32
    [8, 16])", the first two offending leaves named."""
    import torch
    from torch.utils._pytree import keystr, tree_flatten_with_path

    problems: list[str] = []
    leaves, _ = tree_flatten_with_path(out)
    for path, leaf in leaves:
        if isinstance(leaf, torch.Tensor):
            problem = _tensor_problem(leaf.detach())
        elif isinstance(leaf, float) and not math.isfinite(leaf):
            problem = f"the float {leaf}"
        else:
            problem = None
        if problem:
            problems.append(f"output{keystr(path)}: {problem}")
    if not problems:
        return None
    more = f" (and {len(problems) - 2} more)" if len(problems) > 2 else ""
    return "; ".join(problems[:2]) + more
