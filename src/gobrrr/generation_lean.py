"""A lean greedy decode loop over a static KV cache (issue 21, items 4 and 5): what
`model.generate` does for greedy decoding, without its per-step host work, so that the
decode step's own cost can be seen and then taken away.

HF `generate` spends host time around every decode step (logits processors, stopping
criteria, cache bookkeeping, and a device-to-host read of `unfinished_sequences` that
stops the host from running ahead of the GPU). At batch 1 on a GPU that host time is most
of a step (measured on the H200: TinyLlama-1.1B in bf16 with HF's static cache and compiled
forward ran at 16% of the bandwidth bound). This loop does only the model's work:

- prefill: one forward over the prompt into a `transformers.StaticCache` (the cache keeps
  its own write position on the device, `cumulative_length`, so a step needs no host
  arithmetic), then the argmax of the last position;
- decode: `new_tokens - 1` steps, each one forward of one token per sequence and an argmax,
  the chosen token written into a preallocated sequence on the device: nothing reads back
  to the host until the end, so the host queues steps while the GPU runs them.

A decode step runs in one of three modes:
- `eager`: the model's forward as it is (any device);
- `graph` (CUDA): the step (forward, argmax, the next input) captured once into a CUDA
  graph and replayed: one launch per step instead of hundreds (the essay's overhead
  remedy; the arithmetic is the eager one);
- `compile`: the step under `torch.compile` (Inductor's fused kernels: a LLaMA layer's
  dozens of small elementwise kernels become a few), and on CUDA that compiled step
  captured into a CUDA graph as above (what gpt-fast does with reduce-overhead; captured
  by hand because Inductor's own CUDA graphs skip a step that writes its input buffers),
  with Inductor's coordinate-descent tuning of its kernels' launch parameters (gpt-fast's
  setting; measured on the H200, TinyLlama-1.1B bf16 batch 1: the decode step 1.71 ms ->
  1.34 ms, 424 -> 313 kernels, for a compile of 60 s instead of 25 s). On CUDA the
  batch-1 linears' inputs are made buffers of their own while the step compiles
  (inductor_realize.py: Inductor otherwise recomputes the SiLU x up of the down
  projection in each of its output rows; measured there, one sitting, 1.402 -> 1.286 ms).
  Fusion reorders float arithmetic: its logits are close to the eager ones, not equal.

Exactly `new_tokens` tokens, with no stop: an end-of-sequence token is a token like any
other (generate with min_new_tokens=N instead sets its logit to -inf until N tokens, so
the two sequences part where the raw argmax is the end token; the logits compared in
verification are the raw ones, before any processor).

In graph and compile modes the prefill is captured too, for the prompt shape first seen
(its eager kernels, one launch instead of hundreds: on the H200 an eager TinyLlama
prefill took 19-33 ms of host time for 2-3 ms of kernels); a prompt of another shape, or
a capture that fails, runs the prefill eagerly, and `prefill_note` says why.

`attention` picks the SDPA backend for the whole loop ("math", "flash", "efficient",
"cudnn"; None: PyTorch's choice). Under compile the math backend is traced as plain ops
that Inductor fuses, instead of one library kernel per layer.

The model is only read: its weights, config and generation config are untouched (the
cache is the loop's own; the compile mode's hooks on CUDA live only while the step is
compiled and captured). With `force`, the loop feeds the given sequence's tokens
instead of its argmax and keeps every step's logits: the teacher-forced logits that
verification compares (generation_optimize.py).
"""

from __future__ import annotations

import contextlib
import inspect
from typing import Any

from gobrrr.errors import UserError
from gobrrr.inductor_realize import realized_linear_inputs

__all__ = ["LeanDecoder", "MODES", "ATTENTION", "lean_supported"]

MODES = ("eager", "graph", "compile")
ATTENTION = ("math", "flash", "efficient", "cudnn")
WARMUP_STEPS = 3  # eager steps on a side stream before a capture (cuBLAS, allocator)
# Inductor settings for the compiled step: coordinate-descent tuning of its reductions
# (the GEMVs of a batch-1 step become Triton reductions under it; gpt-fast's setting).
INDUCTOR_CONFIG: dict[str, Any] = {"coordinate_descent_tuning": True}


def lean_supported(model: Any) -> str | None:
    """None when the loop can drive this model, else why not (one line)."""
    try:
        import transformers  # noqa: F401
        from transformers import StaticCache  # noqa: F401
    except ImportError:
        return "transformers with StaticCache is not installed"
    params = inspect.signature(model.forward).parameters
    if "position_ids" not in params:
        return f"{type(model).__name__}.forward takes no position_ids"
    if not any(k in params for k in ("past_key_values", "cache")):
        return f"{type(model).__name__}.forward takes no KV cache"
    return None


class LeanDecoder:
    """Greedy decoding of `batch` sequences of up to `max_len` tokens (module docstring).
    One decoder per (batch, max_len); `generate` may be called many times."""

    def __init__(self, model: Any, *, batch: int, max_len: int, mode: str = "eager",
                 attention: str | None = None) -> None:
        import torch
        from transformers import StaticCache

        if mode not in MODES:
            raise UserError(f"lean decode mode must be one of {', '.join(MODES)}, not {mode!r}")
        if attention is not None and attention not in ATTENTION:
            raise UserError(f"attention must be one of {', '.join(ATTENTION)}, not "
                            f"{attention!r}")
        why = lean_supported(model)
        if why:
            raise UserError(f"the lean decode loop cannot drive this model: {why}")
        p = next(model.parameters())
        self.device = p.device
        if mode == "graph" and self.device.type != "cuda":
            raise UserError("lean decode mode 'graph' needs a CUDA model")
        self.model, self.batch, self.max_len, self.mode = model, batch, max_len, mode
        params = inspect.signature(model.forward).parameters
        self._cache_kw = "past_key_values" if "past_key_values" in params else "cache"
        self._keep_kw = "logits_to_keep" in params
        self.cache = StaticCache(config=model.config, max_cache_len=max_len)
        self._tok = torch.zeros(batch, 1, dtype=torch.long, device=self.device)
        self._pos = torch.zeros(1, 1, dtype=torch.long, device=self.device)
        self.attention = attention
        self._graph: Any = None
        self._step_logits: Any = None  # the captured step's output (graph mode)
        self._compiled: Any = None
        self._prefill_graph: Any = None
        self._prefill_ids: Any = None  # the captured prefill's input buffer
        self._prefill_logits: Any = None
        self.prefill_note: str | None = None  # why the prefill runs eagerly, if it does

    def _attention(self) -> Any:
        """The SDPA backend chosen (a context), else nothing."""
        if self.attention is None:
            return contextlib.nullcontext()
        from torch.nn.attention import SDPBackend, sdpa_kernel

        backend = {"math": SDPBackend.MATH, "flash": SDPBackend.FLASH_ATTENTION,
                   "efficient": SDPBackend.EFFICIENT_ATTENTION,
                   "cudnn": SDPBackend.CUDNN_ATTENTION}[self.attention]
        return sdpa_kernel([backend])

    def _forward(self, ids: Any, pos: Any) -> Any:
        kw: dict[str, Any] = {"position_ids": pos, self._cache_kw: self.cache,
                              "use_cache": True}
        if self._keep_kw:
            kw["logits_to_keep"] = 1
        # the backend context inside the step as well as around the loop: a compiled step
        # ignores a context entered outside it (seen on the H200: cuDNN's SDPA kernel in
        # the compiled step under an outer sdpa_kernel([MATH])), while dynamo traces one
        # entered inside it into the graph
        with self._attention():
            return self.model(ids, **kw).logits[:, -1]

    def _eager_step(self) -> Any:
        """One decode step from the input buffers: logits of the next position; the
        buffers then hold the argmax token and the next position."""
        logits = self._forward(self._tok, self._pos)
        self._tok.copy_(logits.argmax(-1, keepdim=True))
        self._pos.add_(1)
        return logits

    def _prefill(self, input_ids: Any) -> Any:
        import torch

        n = input_ids.shape[1]
        pos = torch.arange(n, device=self.device)[None]
        logits = self._forward(input_ids, pos)
        self._tok.copy_(logits.argmax(-1, keepdim=True))
        self._pos.fill_(n)
        return logits

    def _prepare(self, input_ids: Any) -> None:
        """Graph and compile modes, once: warm the step up (compile it), then capture it
        on CUDA, on the prompt given (the cache is reset after)."""
        import torch

        if self.mode == "eager" or self._graph is not None or self._compiled is not None:
            return
        step = self._eager_step
        if self.mode == "compile":
            step = torch.compile(self._eager_step, fullgraph=False, dynamic=False)
        self.cache.reset()
        self._prefill(input_ids)
        if self.device.type != "cuda":  # compile on CPU: no graph to capture
            self._warm(step)
            self._compiled = step
            return
        # the compiled step is only traced and captured here: its hooks (compile mode)
        # are gone before the first replay, and the graph replays without them
        realize = (realized_linear_inputs(self.model) if self.mode == "compile"
                   else contextlib.nullcontext())
        with realize:
            stream = torch.cuda.Stream()
            stream.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(stream):
                self._warm(step)
            torch.cuda.current_stream().wait_stream(stream)
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                self._step_logits = step()
        self._graph = graph
        self._capture_prefill(input_ids)

    def _capture_prefill(self, input_ids: Any) -> None:
        """The prefill of this prompt shape as a CUDA graph (module docstring); on a
        failed capture the prefill stays eager and `prefill_note` says why."""
        import torch

        ids = input_ids.clone()
        try:
            stream = torch.cuda.Stream()
            stream.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(stream):
                self.cache.reset()
                self._prefill(ids)  # warm-up on the capture's stream
            torch.cuda.current_stream().wait_stream(stream)
            self.cache.reset()
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                logits = self._prefill(ids)
        except Exception as exc:  # capture is an optimisation: eager prefill still works
            self.prefill_note = (f"prefill not captured ({type(exc).__name__}: "
                                 f"{str(exc).splitlines()[0][:160]}): it runs eagerly")
            return
        self._prefill_graph, self._prefill_ids, self._prefill_logits = graph, ids, logits

    def _run_prefill(self, input_ids: Any) -> Any:
        if self._prefill_graph is not None and input_ids.shape == self._prefill_ids.shape:
            self._prefill_ids.copy_(input_ids)
            self._prefill_graph.replay()
            return self._prefill_logits
        if self._prefill_graph is not None:
            self.prefill_note = (f"prompt shape {tuple(input_ids.shape)} is not the "
                                 f"captured {tuple(self._prefill_ids.shape)}: its prefill "
                                 "ran eagerly")
        return self._prefill(input_ids)

    def _warm(self, step: Any) -> None:
        """Up to WARMUP_STEPS calls after a prefill, as many as the cache has room for
        (the first compiles, under this loop's Inductor setting: config read at compile
        time, so the patch covers the first call only)."""
        import torch._inductor.config as inductor_config

        room = self.max_len - int(self._pos.item())  # positions left after the prefill
        with inductor_config.patch(**INDUCTOR_CONFIG):
            for _ in range(max(1, min(WARMUP_STEPS, room))):
                step()

    def _step(self) -> Any:
        if self._graph is not None:
            self._graph.replay()
            return self._step_logits
        if self._compiled is not None:
            return self._compiled()
        return self._eager_step()

    def generate(self, input_ids: Any, new_tokens: int, *, force: Any = None
                 ) -> tuple[Any, Any]:
        """(sequences: prompt + new_tokens tokens, the logits of each new token as a
        new_tokens x batch x vocab float32 CPU tensor when `force` is given, else None)."""
        import torch

        b, n = input_ids.shape
        if b != self.batch or n + new_tokens > self.max_len:
            raise UserError(f"this decoder holds batch {self.batch} up to {self.max_len} "
                            f"tokens, not batch {b} with {n} + {new_tokens}")
        with torch.inference_mode(), self._attention():
            self._prepare(input_ids)
            self.cache.reset()
            seq = torch.empty(b, n + new_tokens, dtype=torch.long, device=self.device)
            seq[:, :n] = input_ids
            kept: list[Any] = []
            logits = self._run_prefill(input_ids)
            for i in range(new_tokens):
                if force is not None:
                    kept.append(logits.float().cpu())
                    self._tok.copy_(force[:, n + i:n + i + 1])
                seq[:, n + i:n + i + 1] = self._tok
                if i + 1 < new_tokens:
                    # the step writes its argmax into the input buffer; when forcing, the
                    # reference token replaces it at the top of the next iteration
                    logits = self._step()
        return seq, (torch.stack(kept) if force is not None else None)
