"""Remedies: predict, apply, verify (`gobrrr optimize`).

One module per remedy family (precision, layout, optim, graphs, compiled, attention,
batch); base.py holds the data model, copying.py the independent copies, verify.py the
correctness and speed checks, evaluate.py one candidate through them, runner.py the loop,
result.py what it returns. Importing this package does not import torch.
"""

from __future__ import annotations

__all__ = ["optimize_workload"]


def __getattr__(name: str) -> object:
    if name == "optimize_workload":
        from gobrrr.remedies.runner import optimize_workload

        return optimize_workload
    raise AttributeError(name)
