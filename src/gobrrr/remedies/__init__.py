"""Remedies: predict, apply, verify (`gobrrr optimize`).

One module per remedy family (grad, precision, cudnn, layout, optim, graphs, compiled,
attention, batch); base.py holds the data model, savings.py what each mechanism removes
from the budget (every prediction goes through gobrrr.gains), verify.py the correctness
and speed checks, evaluate.py one candidate through them, plan.py the search order and
skips (pure), runner.py the search, result.py what it returns. gobrrr.api diagnoses first
and calls the search; nothing here imports gobrrr.api. Importing this package does not
import torch.
"""

from __future__ import annotations

__all__ = ["search_workload"]


def __getattr__(name: str) -> object:
    if name == "search_workload":
        from gobrrr.remedies.runner import search_workload

        return search_workload
    raise AttributeError(name)
