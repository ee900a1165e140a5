"""The Lightning callback's body, shared by `gobrrr.integrations.lightning` (the
`lightning` package) and `gobrrr.integrations.pytorch_lightning` (the older one). Each
optimizer step is a step: `trainer.global_step` (optimizer steps taken) changed at
`on_train_batch_end`, so accumulated batches join their optimizer step.

Lightning's automatic optimization runs the forward and backward inside the optimizer's
step() (a closure), so the trace's optimizer range holds them: the phases come from the
autograd and module ranges inside it (phases.py).
"""

from __future__ import annotations

from typing import Any

from gobrrr.integrations.session import CallbackOptions, Session

__all__ = ["LightningBody"]


class LightningBody:
    """The callback's body, for either package's Callback base (a Trainer accepts only
    its own package's callbacks)."""

    def __init__(self, **options: Any) -> None:
        self.options = CallbackOptions(**options)
        self.session = Session("lightning", "Lightning Trainer", self.options)
        self.report: Any = None
        self._global_step: int | None = None

    def on_train_start(self, trainer: Any, pl_module: Any) -> None:
        if trainer.is_global_zero:
            self._global_step = trainer.global_step
            self.session.begin(pl_module, getattr(trainer, "train_dataloader", None))

    def on_train_batch_end(self, trainer: Any, pl_module: Any, outputs: Any, batch: Any,
                           batch_idx: int) -> None:
        if self._global_step is None or trainer.global_step == self._global_step:
            return  # an accumulated batch: its optimizer step is still to come
        self._global_step = trainer.global_step
        if self.session.step():
            trainer.should_stop = True

    def on_train_end(self, trainer: Any, pl_module: Any) -> None:
        self.report = self.session.end()

    def on_exception(self, trainer: Any, pl_module: Any, exception: BaseException) -> None:
        self.session.end()  # every hook off; training's own exception goes on
