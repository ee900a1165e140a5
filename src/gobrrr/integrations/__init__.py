"""gobrrr inside the trainers people use: a callback that measures the trainer's own
steps in place, as `gobrrr run` does a script's (gobrrr.script.StepWindow), and writes
the same report.

- `gobrrr.integrations.hf.GobrrrCallback`: an HF `transformers.TrainerCallback`; each
  optimizer step is a step (`on_step_end`: after gradient accumulation, the optimizer
  step, the scheduler and zero_grad).
- `gobrrr.integrations.lightning.GobrrrCallback`: a Lightning `Callback`; each optimizer
  step is a step (`trainer.global_step` changed at `on_train_batch_end`).
  `gobrrr.integrations.pytorch_lightning.GobrrrCallback`: the same for the older
  `pytorch_lightning` package.

Each imports its library when imported itself; this package imports neither.
"""

__all__: list[str] = []
