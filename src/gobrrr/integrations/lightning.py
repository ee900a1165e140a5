"""`GobrrrCallback`: gobrrr's window over a Lightning `Trainer`'s own steps (the
`lightning` package; `gobrrr.integrations.pytorch_lightning` for `pytorch_lightning`).

    from gobrrr.integrations.lightning import GobrrrCallback
    trainer = lightning.Trainer(max_steps=200, callbacks=[GobrrrCallback(json="g.json")])

Each optimizer step is a step (lightning_body.py); the window is `gobrrr run`'s, the
report is written when it closes and printed when training ends. Under DDP only the
global-zero rank measures its steps (no merged report from a callback yet).
"""

from __future__ import annotations

from lightning.pytorch import Callback

from gobrrr.integrations.lightning_body import LightningBody

__all__ = ["GobrrrCallback"]


class GobrrrCallback(LightningBody, Callback):  # type: ignore[misc]
    """Keyword arguments: CallbackOptions' (warmup, steps, profiled, json, html, trace,
    stop_after, print_report, quiet). `.report` holds the report after training."""
