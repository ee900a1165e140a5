"""The essay's batch experiment for decode (issue 21, item 4): the same greedy generation
at batch 1, 2, 4, ... (the prompt repeated), each decode step timed as
generation.profile_generation times it, until tokens/s stops rising, memory runs out,
the batch cap is reached or the time budget is spent. Each point's generation runs twice,
the first a warm-up (a new batch's first run fills the allocator and picks kernels).

At small batch a decode step reads every weight to make one token per sequence, so the
step time barely grows with the batch and tokens/s rises almost in proportion: memory
(or overhead) bound. Where the step's FLOPs catch up with its bytes, tokens/s flattens:
compute bound. Each point carries both limits at its batch:
- bandwidth: B x measured bandwidth / the step's bytes (weights once, B x the KV cache);
- compute: the compute peak / FLOPs per token (prefill's counted FLOPs per prompt token,
  an upper estimate for a decode token, whose attention spans the same positions or
  fewer), so the crossing batch is where the bandwidth limit passes the compute one.
Approximate: the two limits are roofs, not predictions; the measured tokens/s is the
finding.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

from gobrrr.generation import profile_generation

__all__ = ["BatchPoint", "BatchScaling", "decode_batch_scaling", "RISE", "MAX_BATCH"]

RISE = 1.10  # a doubling that raises tokens/s by less than this: it stopped rising
MAX_BATCH = 256
# Each point's generation is warmed up: without it (tried in session e to halve the
# experiment's time) a new batch's first run was slow in most of its decode steps, not
# only the first, on the H200 (the caching allocator growing as the KV cache grows), and
# batch 2 read 0.56-0.79x the tokens/s of batch 1 on all four 1B-class rows, ending the
# experiment at its second point.
WARMUP_RUNS = 1
Progress = Callable[[str], None]


@dataclass(frozen=True)
class BatchPoint:
    batch: int
    decode_step_s: float  # median decode step
    tokens_per_s: float  # all sequences: batch / step
    bandwidth_bound_tokens_per_s: float | None
    compute_bound_tokens_per_s: float | None
    step_bytes: float

    @property
    def limit(self) -> str | None:
        """Which roof is lower at this batch: "memory" or "compute"."""
        bw, cp = self.bandwidth_bound_tokens_per_s, self.compute_bound_tokens_per_s
        if bw is None or cp is None:
            return None
        return "memory" if bw <= cp else "compute"

    def to_dict(self) -> dict[str, Any]:
        return asdict(self) | {"limit": self.limit}


@dataclass(frozen=True)
class BatchScaling:
    points: list[BatchPoint]
    stopped: str  # why the batch stopped growing
    new_tokens: int  # per generation
    seconds: float

    @property
    def best(self) -> BatchPoint | None:
        return max(self.points, key=lambda p: p.tokens_per_s) if self.points else None

    def summary(self) -> str:
        best = self.best
        if best is None:
            return f"decode batch scaling: no batch ran ({self.stopped})"
        first = self.points[0]
        return (f"decode batch scaling: batch {first.batch} {first.tokens_per_s:,.1f} "
                f"tokens/s -> batch {best.batch} {best.tokens_per_s:,.1f} tokens/s "
                f"({best.tokens_per_s / first.tokens_per_s:.1f}x); {self.stopped}")

    def to_dict(self) -> dict[str, Any]:
        return {"points": [p.to_dict() for p in self.points], "stopped": self.stopped,
                "new_tokens": self.new_tokens, "seconds": self.seconds,
                "best_batch": self.best.batch if self.best else None}


def _is_oom(exc: BaseException) -> bool:
    return "out of memory" in str(exc).lower() or type(exc).__name__ == "OutOfMemoryError"


def decode_batch_scaling(model: Any, input_ids: Any, *, new_tokens: int = 8,
                         bandwidth_bytes_per_s: float | None,
                         peak_flops_per_s: float | None, budget_s: float = 30.0,
                         max_batch: int = MAX_BATCH, progress: Progress | None = None,
                         measure: Callable[..., Any] = profile_generation,
                         clock: Callable[[], float] = time.perf_counter,
                         **generate_kwargs: Any) -> BatchScaling:
    """The batch experiment (module docstring) from the first row of `input_ids`.
    `measure` and `clock`: profile_generation and the host clock, injectable for tests."""
    import torch

    say = progress or (lambda _m: None)
    t0 = clock()
    prompt = input_ids[:1]
    points: list[BatchPoint] = []
    stopped = f"the batch cap ({max_batch}) reached"
    batch = 1
    last_s = 0.0  # the last point's seconds: the next, at twice the batch, takes longer
    per_token: float | None = None  # prefill's FLOPs per prompt token, from the first point
    while batch <= max_batch:
        if points and clock() - t0 + 2 * last_s > budget_s:
            stopped = f"the time budget ({budget_s:.0f} s) would be spent at batch {batch}"
            break
        say(f"decode at batch {batch}: {new_tokens} tokens, each step timed")
        p0 = clock()
        try:
            # prefill's FLOPs per prompt token do not depend on the batch: counted at the
            # first point only (a count is one more forward under the op counter)
            prof = measure(model, prompt.repeat(batch, 1), new_tokens,
                           bandwidth_bytes_per_s=bandwidth_bytes_per_s,
                           peak_flops_per_s=peak_flops_per_s, count_flops=not points,
                           warmup=WARMUP_RUNS, **generate_kwargs)
        except Exception as exc:
            if not _is_oom(exc):
                raise
            if torch.cuda.is_available():
                torch.cuda.empty_cache()
            stopped = f"out of memory at batch {batch}"
            break
        if not points:
            per_token = (prof.prefill_flops / (prof.batch * prof.prompt_len)
                         if prof.prefill_flops else None)
        points.append(BatchPoint(
            batch, prof.decode_step_s, prof.decode_tokens_per_s, prof.bound_tokens_per_s,
            peak_flops_per_s / per_token if per_token and peak_flops_per_s else None,
            prof.step_bytes))
        last_s = clock() - p0
        if len(points) >= 2 and points[-1].tokens_per_s < RISE * points[-2].tokens_per_s:
            rise = points[-1].tokens_per_s / points[-2].tokens_per_s
            stopped = (f"tokens/s rose {rise:.2f}x from batch {points[-2].batch} to "
                       f"{batch}: stopped rising")
            break
        batch *= 2
    return BatchScaling(points, stopped, new_tokens, clock() - t0)
