"""`GobrrrCallback` for the older `pytorch_lightning` package: the same callback as
`gobrrr.integrations.lightning`'s (its docstring says how to use it), on this package's
Callback base, since a Trainer accepts only its own package's callbacks."""

from __future__ import annotations

from pytorch_lightning import Callback

from gobrrr.integrations.lightning_body import LightningBody

__all__ = ["GobrrrCallback"]


class GobrrrCallback(LightningBody, Callback):  # type: ignore[misc]
    """Keyword arguments: CallbackOptions' (warmup, steps, profiled, json, html, trace,
    stop_after, print_report, quiet). `.report` holds the report after training."""
