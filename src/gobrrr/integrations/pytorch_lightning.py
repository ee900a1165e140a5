"""`GobrrrCallback` for the older `pytorch_lightning` package (its Trainer accepts only
its own Callbacks); `gobrrr.integrations.lightning` has the same for `lightning`.

    from gobrrr.integrations.pytorch_lightning import GobrrrCallback
    trainer = pytorch_lightning.Trainer(max_steps=200, callbacks=[GobrrrCallback(json="g.json")])

Each optimizer step is a step (lightning_body.py); the window is `gobrrr run`'s, the
report is written when it closes and printed when training ends. Under DDP only the
global-zero rank measures its steps (no merged report from a callback yet).
"""

from __future__ import annotations

from pytorch_lightning import Callback

from gobrrr.integrations.lightning_body import LightningBody

__all__ = ["GobrrrCallback"]


class GobrrrCallback(LightningBody, Callback):  # type: ignore[misc]
    """Keyword arguments: CallbackOptions' (warmup, steps, profiled, json, html, trace,
    stop_after, print_report, quiet). `.report` holds the report after training."""
