"""LLM generation read as its two phases (issue 21, first part): prefill (one forward over
the prompt) and decode (one forward per new token), each step timed, and the bytes a
decode step must read counted from the model and its KV cache, so decode's tokens/s can
be set against the memory-bandwidth limit (MBU, the fraction of it reached).

- Phases from the model's own forward calls (no word from the user): a forward over
  more than one new position per sequence is prefill, one position is a decode step.
- The bytes of a decode step that attends to p positions (the cache with the step's
  own K/V appended: the k-th decode step after a T-token prompt attends to T + k), at
  batch B:
  W + B x (E + p x K), where
  W: every parameter the step reads in full, each tensor once (an output head tied to
  the input embedding is read whole, by the head);
  E: one row of each input embedding table per sequence (a lookup reads the rows it
  needs, not the table: GPT-2's wte and wpe, LLaMA's embed_tokens when untied);
  K: the KV cache's bytes per position per sequence, read from the cache the model
  returned (every layer's keys and values), else from the config (layers x 2 x KV heads x
  head_dim x element size, the GQA head count).
  Activations, the logits and the new K/V written are left out: at small batch they are
  a few MB against GB of weights (approximate; the report says so).
- The bound: B tokens per step at (bytes / measured bandwidth) per step, so the
  bandwidth-bound tokens/s is B x bandwidth / mean step bytes over the decode steps.

Prefill's FLOPs come from one more forward over the prompt under torch's FlopCounterMode
(the same shapes; matmuls and attention, as the flop counter counts them), so MFU is
those FLOPs over the measured prefill time over the compute peak given.

Timing: the host clock at each forward's start, with a device synchronization there on
CUDA, so a step's time is from its forward's start to the next one's: the forward and
the host work between forwards (sampling, stopping checks, cache bookkeeping) alike.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from gobrrr.errors import UserError
from gobrrr.timing import device_sync
from gobrrr.units import fmt_num, fmt_s

__all__ = ["DecodeBytes", "GenerationProfile", "decode_bytes", "cache_bytes_per_position",
           "new_positions",
           "profile_generation", "APPROXIMATE_NOTE"]

APPROXIMATE_NOTE = ("decode bytes: weights once per step, one embedding row per sequence "
                    "and the KV cache up to the step's position; activations, logits and "
                    "the new K/V written are left out (approximate, small at small batch)")


@dataclass(frozen=True)
class DecodeBytes:
    """What one decode step reads (module docstring): W, E and K."""

    weights_bytes: int
    embedding_row_bytes: int
    kv_bytes_per_position: int
    kv_source: str  # "the cache" | "the config"

    def step_bytes(self, batch: int, position: int) -> int:
        """W + B x (E + p x K) for a step attending to `position` positions."""
        return self.weights_bytes + batch * (self.embedding_row_bytes
                                             + position * self.kv_bytes_per_position)

    def mean_step_bytes(self, batch: int, prompt_len: int, new_tokens: int) -> float:
        """The mean over a generation's decode steps: after the prefill, new_tokens - 1
        steps attending to prompt_len + 1 ... prompt_len + new_tokens - 1 positions."""
        steps = range(1, max(2, new_tokens))
        return statistics.fmean(self.step_bytes(batch, prompt_len + k) for k in steps)


def _weights(model: Any) -> tuple[int, int]:
    """(W, E): the bytes of every parameter and buffer tensor read whole, each once, and
    one row of each input embedding table that no other module reads whole."""
    from torch import nn

    embeddings = {id(m.weight): m.weight for m in model.modules()
                  if isinstance(m, nn.Embedding)}
    # a tensor some other module holds too (a tied output head) is read whole by it
    held_elsewhere: set[int] = set()
    for m in model.modules():
        if isinstance(m, nn.Embedding):
            continue
        for p in m.parameters(recurse=False):
            held_elsewhere.add(id(p))
    whole, rows = 0, 0
    seen: set[int] = set()
    for p in model.parameters():
        if id(p) in seen:
            continue
        seen.add(id(p))
        size = p.numel() * p.element_size()
        if id(p) in embeddings and id(p) not in held_elsewhere:
            rows += p.shape[-1] * p.element_size()
        else:
            whole += size
    return whole, rows


def cache_bytes_per_position(cache: Any) -> tuple[int, int] | None:
    """(bytes per position per sequence, positions) of an HF KV cache: its layers' keys
    and values (DynamicCache's `layers`, the older `key_cache`/`value_cache` lists, or
    the legacy tuple of (key, value) pairs); None when no tensor is found."""
    import torch

    pairs: list[tuple[Any, Any]] = []
    if hasattr(cache, "layers"):
        pairs = [(getattr(layer, "keys", None), getattr(layer, "values", None))
                 for layer in cache.layers]
    elif hasattr(cache, "key_cache"):
        pairs = list(zip(cache.key_cache, cache.value_cache, strict=False))
    elif isinstance(cache, (tuple, list)):
        pairs = [tuple(p[:2]) for p in cache if isinstance(p, (tuple, list)) and len(p) >= 2]
    tensors = [t for pair in pairs for t in pair if isinstance(t, torch.Tensor)
               and t.dim() == 4]  # (batch, kv heads, positions, head_dim)
    if not tensors:
        return None
    batch, positions = tensors[0].shape[0], tensors[0].shape[-2]
    if batch == 0 or positions == 0:
        return None
    total = sum(t.numel() * t.element_size() for t in tensors)
    return total // (batch * positions), int(positions)


def _config_kv_bytes(model: Any) -> int | None:
    """layers x 2 x KV heads x head_dim x element size, from an HF config."""
    cfg = getattr(model, "config", None)
    if cfg is None:
        return None
    get = getattr(cfg, "get_text_config", None)
    cfg = get() if callable(get) else cfg
    layers = getattr(cfg, "num_hidden_layers", None) or getattr(cfg, "n_layer", None)
    heads = getattr(cfg, "num_attention_heads", None) or getattr(cfg, "n_head", None)
    hidden = getattr(cfg, "hidden_size", None) or getattr(cfg, "n_embd", None)
    if not (layers and heads and hidden):
        return None
    kv_heads = getattr(cfg, "num_key_value_heads", None) or heads
    head_dim = getattr(cfg, "head_dim", None) or hidden // heads
    size = next(iter(model.parameters())).element_size()
    return int(layers * 2 * kv_heads * head_dim * size)


def decode_bytes(model: Any, cache: Any = None) -> DecodeBytes:
    """W, E and K of `model` (module docstring); K from `cache` when it holds tensors."""
    whole, rows = _weights(model)
    got = cache_bytes_per_position(cache) if cache is not None else None
    if got is not None:
        return DecodeBytes(whole, rows, got[0], "the cache")
    kv = _config_kv_bytes(model)
    if kv is None:
        raise UserError("cannot tell the KV cache's size: the model returned no cache and "
                        "its config has no layer, head and hidden sizes")
    return DecodeBytes(whole, rows, kv, "the config")


@dataclass
class GenerationProfile:
    """One measured generation: its prefill and decode steps, and the decode bound."""

    batch: int
    prompt_len: int
    prefill_s: float
    decode_s: list[float]  # each decode step, in order
    positions: list[int]  # the positions each decode step attends to
    bytes: DecodeBytes
    bandwidth_bytes_per_s: float | None
    device: str
    notes: list[str] = field(default_factory=list)
    prefill_flops: int | None = None  # FlopCounterMode over one forward of the prompt
    peak_flops_per_s: float | None = None

    @property
    def mfu(self) -> float | None:
        """Prefill's achieved FLOP/s over the compute peak."""
        if not (self.prefill_flops and self.peak_flops_per_s and self.prefill_s > 0):
            return None
        return self.prefill_flops / self.prefill_s / self.peak_flops_per_s

    @property
    def new_tokens(self) -> int:
        return 1 + len(self.decode_s)  # the prefill yields the first new token

    @property
    def decode_step_s(self) -> float:
        return statistics.median(self.decode_s) if self.decode_s else 0.0

    @property
    def decode_tokens_per_s(self) -> float:
        step = self.decode_step_s
        return self.batch / step if step > 0 else 0.0

    @property
    def step_bytes(self) -> float:
        """Mean bytes a decode step reads, over the steps measured."""
        if not self.positions:
            return float(self.bytes.step_bytes(self.batch, self.prompt_len))
        return statistics.fmean(self.bytes.step_bytes(self.batch, p) for p in self.positions)

    @property
    def bound_tokens_per_s(self) -> float | None:
        if not self.bandwidth_bytes_per_s:
            return None
        return self.batch * self.bandwidth_bytes_per_s / self.step_bytes

    @property
    def mbu(self) -> float | None:
        """Decode's achieved bytes per second over the measured bandwidth."""
        bound = self.bound_tokens_per_s
        return self.decode_tokens_per_s / bound if bound else None

    def summary(self) -> str:
        mbu = self.mbu
        limit = ("" if mbu is None else
                 f" of a bandwidth bound of {self.bound_tokens_per_s:,.0f} tokens/s "
                 f"({fmt_num(self.step_bytes, 'B')} a step): {mbu:.1%} of it")
        return (f"prefill {fmt_s(self.prefill_s)} for {self.batch} x {self.prompt_len} "
                f"tokens; decode {fmt_s(self.decode_step_s)} a step, "
                f"{self.decode_tokens_per_s:,.1f} tokens/s{limit}")

    def to_dict(self) -> dict[str, Any]:
        return {
            "batch": self.batch, "prompt_len": self.prompt_len,
            "new_tokens": self.new_tokens, "device": self.device,
            "prefill": {"seconds": self.prefill_s,
                        "tokens_per_s": (self.batch * self.prompt_len / self.prefill_s
                                         if self.prefill_s > 0 else None),
                        "flops": self.prefill_flops,
                        "flops_per_token": (self.prefill_flops / (self.batch
                                                                   * self.prompt_len)
                                            if self.prefill_flops else None),
                        "peak_flops_per_s": self.peak_flops_per_s, "mfu": self.mfu},
            "decode": {"steps": len(self.decode_s), "step_s": self.decode_s,
                       "median_step_s": self.decode_step_s,
                       "tokens_per_s": self.decode_tokens_per_s,
                       "step_bytes": self.step_bytes,
                       "weights_bytes": self.bytes.weights_bytes,
                       "embedding_row_bytes": self.bytes.embedding_row_bytes,
                       "kv_bytes_per_position": self.bytes.kv_bytes_per_position,
                       "kv_source": self.bytes.kv_source,
                       "bandwidth_bytes_per_s": self.bandwidth_bytes_per_s,
                       "bound_tokens_per_s": self.bound_tokens_per_s, "mbu": self.mbu},
            "notes": list(self.notes),
        }


def new_positions(args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> int | None:
    """How many new positions per sequence a forward call computes."""
    ids = kwargs.get("input_ids", args[0] if args else None)
    if ids is not None and hasattr(ids, "shape") and len(ids.shape) >= 2:
        return int(ids.shape[-1])
    emb = kwargs.get("inputs_embeds")
    if emb is not None and hasattr(emb, "shape") and len(emb.shape) == 3:
        return int(emb.shape[1])
    return None


def _cache_of(out: Any) -> Any:
    return getattr(out, "past_key_values", None) or (
        out.get("past_key_values") if isinstance(out, Mapping) else None)


def profile_generation(model: Any, input_ids: Any, new_tokens: int, *,
                       warmup: int = 1, bandwidth_bytes_per_s: float | None = None,
                       peak_flops_per_s: float | None = None,
                       generate: Callable[..., Any] | None = None,
                       count_flops: bool = True,
                       **generate_kwargs: Any) -> GenerationProfile:
    """Greedy generation of exactly `new_tokens` tokens after `input_ids` (B x T), run
    `warmup` times as it is, then once with each forward timed (module docstring).
    `generate` overrides `model.generate` (a user's own decode loop that calls the model
    once per token). `count_flops`: count prefill's FLOPs (one more forward under
    gobrrr's op counter; `prefill_flops` is None without it). The model is unchanged
    afterwards: only two hooks, removed."""
    import torch

    if not isinstance(new_tokens, int) or new_tokens < 2:
        raise UserError(f"generate at least 2 new tokens (one prefill, one decode step), "
                        f"not {new_tokens!r}")
    if generate is None:
        if not callable(getattr(model, "generate", None)):
            raise UserError(f"{type(model).__name__} has no generate(): give a model "
                            "with one (an HF causal LM) or your own loop as generate=")
        kw = {"max_new_tokens": new_tokens, "min_new_tokens": new_tokens,
              "do_sample": False, **generate_kwargs}

        def run() -> Any:
            return model.generate(input_ids, **kw)
    else:
        def run() -> Any:
            return generate(model, input_ids, new_tokens)

    device = input_ids.device.type
    sync = device_sync(device)
    calls: list[tuple[float, int | None]] = []  # (start, new positions)
    caches: list[Any] = []

    # The hooks run outside any compiled graph: transformers compiles the forward of a
    # static-cache generate, and a traced hook would guard on len(calls) and recompile at
    # every step (seen on the H200: dynamo's recompile limit hit at the 8th step).
    @torch.compiler.disable
    def pre(_m: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        sync()
        calls.append((time.perf_counter(), new_positions(args, kwargs)))

    @torch.compiler.disable
    def post(_m: Any, _args: Any, _kwargs: Any, out: Any) -> None:
        if not caches and (c := _cache_of(out)) is not None:
            caches.append(c)  # after the prefill: the cache its decode steps read

    with torch.inference_mode():
        for _ in range(warmup):
            run()
        handles = [model.register_forward_pre_hook(pre, with_kwargs=True),
                   model.register_forward_hook(post, with_kwargs=True)]
        try:
            run()
            sync()
            end = time.perf_counter()
        finally:
            for h in handles:
                h.remove()
        # read the cache's size now, before it is freed or reused
        dbytes = decode_bytes(model, caches[0] if caches else None)
        flops = _prefill_flops(model, input_ids) if count_flops else None
    prof = _profile(calls, end, input_ids, dbytes, bandwidth_bytes_per_s, device)
    prof.prefill_flops, prof.peak_flops_per_s = flops, peak_flops_per_s
    return prof


def _prefill_flops(model: Any, input_ids: Any) -> int | None:
    """Matmul and attention FLOPs of one forward over the prompt, counted by gobrrr's op
    counter (torch's formulas, grouped-query attention counted as repeated key/value
    heads: torch 2.11's FlopCounterMode asserts on a LLaMA-style GQA model); None if none
    counted."""
    from gobrrr.counting import count

    try:
        counted = count(lambda: model(input_ids=input_ids))
    except TypeError:  # not an HF model: its forward takes the ids positionally
        counted = count(lambda: model(input_ids))
    # the FLOPs of torch's formulas (matmuls, attention): what the matmul peak bounds
    return sum(r.flops for r in counted.records if r.has_formula
               and r.op_class in ("matmul", "attention", "conv")) or None


def _profile(calls: list[tuple[float, int | None]], end: float, input_ids: Any,
             dbytes: DecodeBytes, bandwidth: float | None, device: str
             ) -> GenerationProfile:
    if not calls:
        raise UserError("the generation never called the model's forward")
    starts = [t for t, _ in calls] + [end]
    steps = [b - a for a, b in zip(starts, starts[1:], strict=False)]
    batch, prompt = int(input_ids.shape[0]), int(input_ids.shape[-1])
    prefill = [s for s, (_, n) in zip(steps, calls, strict=True) if n is not None and n > 1]
    decode = [(s, i) for i, (s, (_, n)) in enumerate(zip(steps, calls, strict=True))
              if n == 1]
    notes = [APPROXIMATE_NOTE]
    if len(prefill) != 1:
        notes.append(f"{len(prefill)} forward calls over several positions (one expected: "
                     "the prompt's prefill)")
    # the k-th decode step attends to the prompt, the k - 1 tokens before it and its own
    positions = [prompt + k for k in range(1, len(decode) + 1)]
    return GenerationProfile(batch, prompt, sum(prefill), [s for s, _ in decode],
                             positions, dbytes, bandwidth, device, notes)
