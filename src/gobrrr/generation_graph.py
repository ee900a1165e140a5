"""The decode step's CUDA-graph experiment (issue 21, item 4): the essay's test for
overhead, on the decode step that a static KV cache makes capturable.

The same greedy decode (generation_lean.LeanDecoder, a static cache, no per-step host work
of `generate`) runs twice: with its decode step eager, and captured once into a CUDA graph
and replayed. The kernels are the same; the graph removes their launches and the Python
between them. So:
- step_s(mode) = (T(N tokens) - T(1 token)) / (N - 1): a decode step's time, the prefill
  taken out (T: the median of REPEATS generations, synchronised at their ends);
- the share of the eager step the graph removed, 1 - step_s(graph) / step_s(eager), is
  the decode step's launch and host overhead; what is left is the kernels' own time,
  set beside the bandwidth bound's step time (bytes / measured bandwidth);
- generate's own per-step host work (logits processors, stopping checks) is the
  difference between the decode step inside `generate` (generation.py) and the eager
  step here.
CUDA only (a graph needs it); elsewhere the experiment says it did not run and why.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

__all__ = ["DecodeGraphResult", "decode_graph_experiment", "REPEATS"]

REPEATS = 3
Progress = Callable[[str], None]


@dataclass
class DecodeGraphResult:
    new_tokens: int
    eager_step_s: float | None = None
    graph_step_s: float | None = None
    bound_step_s: float | None = None  # the decode step's bytes / measured bandwidth
    capture_s: float | None = None  # the first graph generation (warm-up and capture)
    skipped: str | None = None
    error: str | None = None

    @property
    def overhead_share(self) -> float | None:
        """The share of the eager decode step a CUDA graph removed."""
        if not self.eager_step_s or self.graph_step_s is None:
            return None
        return max(0.0, 1.0 - self.graph_step_s / self.eager_step_s)

    def summary(self) -> str:
        if self.skipped or self.error:
            return f"decode CUDA-graph experiment: {self.skipped or self.error}"
        from gobrrr.units import fmt_s

        assert self.eager_step_s is not None and self.graph_step_s is not None
        share = self.overhead_share or 0.0
        text = (f"decode CUDA-graph experiment: a decode step takes "
                f"{fmt_s(self.eager_step_s)} eager and {fmt_s(self.graph_step_s)} replayed "
                f"as one CUDA graph: {share:.0%} of the eager step is launch and host "
                f"overhead")
        if self.bound_step_s:
            text += (f"; the graph's step is {self.graph_step_s / self.bound_step_s:.1f}x "
                     f"the bandwidth bound's {fmt_s(self.bound_step_s)} (what remains: "
                     f"the kernels themselves, unfused)")
        return text

    def to_dict(self) -> dict[str, Any]:
        return asdict(self) | {"overhead_share": self.overhead_share,
                               "summary": self.summary()}


def _median_s(run: Callable[[], Any], sync: Callable[[], None]) -> float:
    secs = []
    for _ in range(REPEATS):
        sync()
        t0 = time.perf_counter()
        run()
        sync()
        secs.append(time.perf_counter() - t0)
    return statistics.median(secs)


def _step_s(dec: Any, input_ids: Any, new_tokens: int, sync: Callable[[], None],
            res: DecodeGraphResult) -> float:
    """One mode's decode step: a warm-up (a graph's capture: `res.capture_s`), then
    (T(N) - T(1)) / (N - 1)."""
    t0 = time.perf_counter()
    dec.generate(input_ids, new_tokens)
    sync()
    if dec.mode == "graph":
        res.capture_s = time.perf_counter() - t0
    t_all = _median_s(lambda: dec.generate(input_ids, new_tokens), sync)
    t_one = _median_s(lambda: dec.generate(input_ids, 1), sync)
    return max(0.0, t_all - t_one) / (new_tokens - 1)


def decode_graph_experiment(model: Any, input_ids: Any, *, new_tokens: int = 16,
                            bound_step_s: float | None = None,
                            progress: Progress | None = None) -> DecodeGraphResult:
    """The experiment (module docstring) on `new_tokens` tokens (at least 2)."""
    from gobrrr.generation_lean import LeanDecoder, lean_supported
    from gobrrr.timing import device_sync

    say = progress or (lambda _m: None)
    res = DecodeGraphResult(new_tokens, bound_step_s=bound_step_s)
    device = input_ids.device.type
    why = ("CUDA graphs need a CUDA device" if device != "cuda"
           else lean_supported(model))
    if why:
        res.skipped = f"not run: {why}"
        return res
    sync = device_sync(device)
    b, n = int(input_ids.shape[0]), int(input_ids.shape[1])
    steps: dict[str, float] = {}
    try:
        for mode in ("eager", "graph"):
            say(f"decode CUDA-graph experiment: {new_tokens} tokens, the decode step {mode}")
            steps[mode] = _step_s(LeanDecoder(model, batch=b, max_len=n + new_tokens,
                                              mode=mode), input_ids, new_tokens, sync, res)
    except Exception as exc:  # the experiment failing is a finding, not a crash
        res.error = f"failed: {type(exc).__name__}: {str(exc).splitlines()[0][:200]}"
        return res
    res.eager_step_s, res.graph_step_s = steps["eager"], steps["graph"]
    return res
