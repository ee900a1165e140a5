"""Training steps in the shapes users' scripts take, for the state-guarantee tests: each
`make_*()` builds fresh objects (module globals where the shape needs them), runs one
real step so gradients and optimizer state exist, and returns (step, args, objects):
`objects` names everything whose state the test compares before and after gobrrr."""

from __future__ import annotations

import functools
import itertools
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn


def _model(seed: int = 0) -> nn.Module:
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4))


def _data() -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(1)
    return torch.randn(8, 16, generator=g), torch.randn(8, 4, generator=g)


def _train(model: nn.Module, opt: torch.optim.Optimizer, x: torch.Tensor,
           y: torch.Tensor) -> torch.Tensor:
    opt.zero_grad()
    loss = nn.functional.mse_loss(model(x), y)
    loss.backward()
    opt.step()
    return loss.detach()


# ---------------------------------------------------------------- a closure


def make_closure() -> tuple[Any, tuple, dict[str, Any]]:
    model = _model()
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    x, y = _data()

    def step(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return _train(model, opt, x, y)

    step(x, y)
    return step, (x, y), {"model": model, "opt": opt}


# ---------------------------------------------------------------- a module-level trainer


class Trainer:
    def __init__(self) -> None:
        self.model = _model()
        self.opt = torch.optim.AdamW(self.model.parameters(), lr=1e-2)
        self.sched = torch.optim.lr_scheduler.StepLR(self.opt, step_size=2, gamma=0.5)
        self.steps = 0
        self.losses: list[torch.Tensor] = []

    def step(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        loss = _train(self.model, self.opt, x, y)
        self.sched.step()
        self.steps += 1
        self.losses.append(loss)
        return loss


TRAINER: Trainer | None = None


def trainer_step(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    assert TRAINER is not None
    return TRAINER.step(x, y)


def make_trainer() -> tuple[Any, tuple, dict[str, Any]]:
    global TRAINER
    TRAINER = Trainer()
    x, y = _data()
    trainer_step(x, y)
    return trainer_step, (x, y), {"model": TRAINER.model, "opt": TRAINER.opt,
                                  "sched": TRAINER.sched, "trainer": TRAINER}


# ---------------------------------------------------------------- a module-level dict

STATE: dict[str, Any] = {}


def dict_step(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return _train(STATE["model"], STATE["opt"], x, y)


def make_dict() -> tuple[Any, tuple, dict[str, Any]]:
    STATE.clear()
    STATE["model"] = _model()
    STATE["opt"] = torch.optim.SGD(STATE["model"].parameters(), lr=0.1, momentum=0.9)
    x, y = _data()
    dict_step(x, y)
    return dict_step, (x, y), {"model": STATE["model"], "opt": STATE["opt"]}


# ---------------------------------------------------------------- functools.partial


def make_partial() -> tuple[Any, tuple, dict[str, Any]]:
    model = _model()
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    x, y = _data()
    step = functools.partial(_train, model, opt)
    step(x, y)
    return step, (x, y), {"model": model, "opt": opt}


# ---------------------------------------------------------------- an LR scheduler, a counter

STEP = 0
SCHED: Any = None
OPT: Any = None
MODEL: Any = None


def sched_step(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    global STEP
    loss = _train(MODEL, OPT, x, y)
    SCHED.step()
    STEP += 1
    return loss


def make_scheduler() -> tuple[Any, tuple, dict[str, Any]]:
    global MODEL, OPT, SCHED, STEP
    MODEL = _model()
    OPT = torch.optim.SGD(MODEL.parameters(), lr=0.1)
    SCHED = torch.optim.lr_scheduler.OneCycleLR(OPT, max_lr=0.5, total_steps=10**6)
    STEP = 0
    x, y = _data()
    sched_step(x, y)
    return sched_step, (x, y), {"model": MODEL, "opt": OPT, "sched": SCHED}


# ---------------------------------------------------------------- nested containers


@dataclass
class Bundle:
    parts: dict[str, Any]


def make_nested() -> tuple[Any, tuple, dict[str, Any]]:
    model = _model()
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    bundle = Bundle({"pair": [(model, opt)], "ema": {"w": torch.zeros(4)}})
    x, y = _data()

    def step(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        (m, o), = bundle.parts["pair"]
        loss = _train(m, o, x, y)
        bundle.parts["ema"]["w"].mul_(0.9).add_(m[2].bias.detach(), alpha=0.1)
        return loss

    step(x, y)
    return step, (x, y), {"model": model, "opt": opt, "ema": bundle.parts["ema"]["w"]}


# ---------------------------------------------------------------- a data iterator


def make_iterator() -> tuple[Any, tuple, dict[str, Any]]:
    """A step that draws its batch from an iterator: gobrrr cannot rewind it."""
    model = _model()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    batches = ((torch.full((8, 16), float(i)), torch.zeros(8, 4)) for i in itertools.count())

    def step() -> torch.Tensor:
        x, y = next(batches)
        return _train(model, opt, x, y)

    step()
    return step, (), {"model": model, "opt": opt, "batches": batches}


SHAPES = {"closure": make_closure, "trainer": make_trainer, "dict": make_dict,
          "partial": make_partial, "scheduler": make_scheduler, "nested": make_nested}
