"""`GobrrrCallback`: gobrrr's window over an HF `transformers.Trainer`'s own steps.

    from gobrrr.integrations.hf import GobrrrCallback
    trainer = Trainer(model=model, args=args, train_dataset=ds,
                      callbacks=[GobrrrCallback(json="gobrrr.json")])

Each optimizer step is a step (`on_step_end` comes after the accumulated backward, the
optimizer step, the scheduler and zero_grad); the window is `gobrrr run`'s (warm-up,
timed unprofiled, profiled), the report is written when it closes and printed when
training ends. Under torchrun only the main process (rank 0) measures its steps: the
other ranks run as they are (no merged report from a callback yet).
"""

from __future__ import annotations

from typing import Any

from transformers import TrainerCallback

from gobrrr.integrations.session import CallbackOptions, Session

__all__ = ["GobrrrCallback"]


class GobrrrCallback(TrainerCallback):  # type: ignore[misc]
    """Keyword arguments: CallbackOptions' (warmup, steps, profiled, json, html, trace,
    stop_after, print_report, quiet). `.report` holds the report after training."""

    def __init__(self, **options: Any) -> None:
        self.options = CallbackOptions(**options)
        self.session = Session("hf_trainer", "HF Trainer", self.options)
        self.report: Any = None

    def on_train_begin(self, args: Any, state: Any, control: Any, model: Any = None,
                       train_dataloader: Any = None, **kwargs: Any) -> None:
        if state.is_world_process_zero and model is not None:
            self.session.begin(model, train_dataloader)

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if self.session.step():
            control.should_training_stop = True

    def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self.report = self.session.end()
