"""The prompt-length experiment for prefill (issue 21, item 4): the same greedy
generation of 2 tokens (one prefill, one decode step) after prompts of the doctor's
length, then twice it, four times, ..., each prefill timed and its FLOPs counted as
generation.profile_generation does, until prefill's tokens/s stops rising, the model's
positions run out, memory runs out, or the time budget is spent.

A short prompt's prefill is a thin matmul over few rows: it reads every weight for few
tokens and sits far from the compute roof (low MFU), so a longer prompt costs little
more time and tokens/s rises; where the matmuls are wide enough to keep the compute
units busy, time grows with the tokens and tokens/s flattens, at a high MFU: compute
bound (and past that, attention's T^2 FLOPs make it fall). Each point carries its MFU
against the measured compute peak. One generation per length, no repeats: approximate,
like the batch experiment.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

from gobrrr.generation import profile_generation

__all__ = ["PromptPoint", "PromptScaling", "prefill_length_scaling", "RISE", "max_positions"]

RISE = 1.10  # a doubling that raises prefill tokens/s by less than this: it stopped rising
Progress = Callable[[str], None]


@dataclass(frozen=True)
class PromptPoint:
    prompt_len: int
    prefill_s: float
    tokens_per_s: float  # batch x prompt_len / prefill_s
    flops: int | None
    mfu: float | None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class PromptScaling:
    points: list[PromptPoint]
    stopped: str
    seconds: float

    def summary(self) -> str:
        if not self.points:
            return f"prefill by prompt length: no length ran ({self.stopped})"
        first, last = self.points[0], self.points[-1]
        mfu = (f", MFU {first.mfu:.1%} -> {last.mfu:.1%}"
               if first.mfu is not None and last.mfu is not None else "")
        return (f"prefill by prompt length: {first.prompt_len} tokens "
                f"{first.tokens_per_s:,.0f} tokens/s -> {last.prompt_len} tokens "
                f"{last.tokens_per_s:,.0f} tokens/s{mfu}; {self.stopped}")

    def to_dict(self) -> dict[str, Any]:
        return {"points": [p.to_dict() for p in self.points], "stopped": self.stopped,
                "seconds": self.seconds}


def max_positions(model: Any) -> int | None:
    """The longest sequence the model's config allows (None: it does not say)."""
    cfg = getattr(model, "config", None)
    for key in ("max_position_embeddings", "n_positions", "n_ctx"):
        value = getattr(cfg, key, None)
        if isinstance(value, int) and value > 0:
            return value
    return None


def _is_oom(exc: BaseException) -> bool:
    return "out of memory" in str(exc).lower() or type(exc).__name__ == "OutOfMemoryError"


def prefill_length_scaling(model: Any, input_ids: Any, *, peak_flops_per_s: float | None,
                           budget_s: float = 15.0, progress: Progress | None = None,
                           measure: Callable[..., Any] = profile_generation,
                           clock: Callable[[], float] = time.perf_counter,
                           **generate_kwargs: Any) -> PromptScaling:
    """The experiment (module docstring) from `input_ids` (its batch kept, its prompt
    repeated along the sequence to each length). `measure` and `clock`: injectable for
    tests."""
    import torch

    say = progress or (lambda _m: None)
    t0 = clock()
    length = int(input_ids.shape[1])
    limit = max_positions(model)
    points: list[PromptPoint] = []
    stopped = "no longer prompt fits the model's positions"
    last_s = 0.0
    while limit is None or length + 2 <= limit:  # 2 new tokens after the prompt
        if points and clock() - t0 + 2 * last_s > budget_s:
            stopped = f"the time budget ({budget_s:.0f} s) would be spent at {length} tokens"
            break
        ids = input_ids.repeat(1, -(-length // input_ids.shape[1]))[:, :length]
        say(f"prefill of {length} prompt tokens")
        p0 = clock()
        try:
            prof = measure(model, ids, 2, peak_flops_per_s=peak_flops_per_s,
                           **generate_kwargs)
        except Exception as exc:
            if not _is_oom(exc):
                raise
            if torch.cuda.is_available():
                torch.cuda.empty_cache()
            stopped = f"out of memory at {length} prompt tokens"
            break
        tokens = prof.batch * prof.prompt_len
        points.append(PromptPoint(length, prof.prefill_s,
                                  tokens / prof.prefill_s if prof.prefill_s > 0 else 0.0,
                                  prof.prefill_flops, prof.mfu))
        last_s = clock() - p0
        if len(points) >= 2 and points[-1].tokens_per_s < RISE * points[-2].tokens_per_s:
            rise = points[-1].tokens_per_s / max(points[-2].tokens_per_s, 1e-30)
            stopped = (f"tokens/s rose {rise:.2f}x from {points[-2].prompt_len} to "
                       f"{length} tokens: stopped rising")
            break
        length *= 2
    return PromptScaling(points, stopped, clock() - t0)
