"""Count every aten op's FLOPs and minimum bytes, with its dtype and nn.Module path.

One pass of the workload under a `TorchDispatchMode` (the shape of
`torch.utils.flop_counter`): each op is seen after autograd has decomposed the Python
call, so forward, backward and optimizer steps are all counted.

FLOPs: matmuls, convolutions and attention reuse `torch.utils.flop_counter`'s registered
formulas (2 FLOPs per multiply-add). The other formulas are ours, each with its reason
below. An op with no formula is recorded with `has_formula=False` and listed in
`CountResult.uncounted_ops`: never silently zero.

Bytes: the *minimum* traffic of the op run alone: every distinct input tensor read once
and every output written once, at its dtype's itemsize. Views move nothing (0 bytes). An
in-place op reads its operands and writes its mutated argument once (`x.mul_(2)` moves
2N bytes: one read and one write of x). A broadcast (stride-0) input counts its distinct
elements only. Caches make real traffic lower for small tensors and unfused chains make
it higher for large ones; this is the roofline's bytes, not a hardware counter.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

from gobrrr.phases import BACKWARD, FORWARD, OPTIMIZER
from gobrrr.settings import tf32_enabled

__all__ = [
    "OpRecord",
    "OpTotals",
    "CountResult",
    "count",
    "count_marked",
    "count_with_calls",
    "RANGE_PREFIX",
    "dtype_name",
    "MATMUL_CLASSES",
    "count_op",
    "math_elements",
]

aten = torch.ops.aten

MATMUL_CLASSES = ("matmul", "conv", "attention")
RANGE_PREFIX = "gobrrr#"

_DTYPE_NAMES = {
    torch.float32: "fp32",
    torch.float16: "fp16",
    torch.bfloat16: "bf16",
    torch.float64: "fp64",
    torch.int64: "int64",
    torch.int32: "int32",
    torch.int16: "int16",
    torch.int8: "int8",
    torch.uint8: "uint8",
    torch.bool: "bool",
}


def dtype_name(dtype: torch.dtype) -> str:
    return _DTYPE_NAMES.get(dtype, str(dtype).replace("torch.", ""))


@dataclass
class OpRecord:
    """One aten op call."""

    index: int  # call order within the counted run
    op: str  # e.g. "aten::mm"
    module: str  # innermost nn.Module path ("Global" outside any), or "optimizer.Adam"
    phase: str  # phases.py: forward, backward, optimizer, compiled, ... or a range name
    op_class: str  # matmul conv attention norm softmax pointwise reduction copy view other
    dtype: str
    flops: int
    bytes: int
    tensor_core_unit: str | None  # peak to read for matmul-class ops: bf16 fp16 tf32 fp32
    has_formula: bool
    out_shape: tuple[int, ...] = ()
    # Storage identities read and written, for the fusion estimate (budget.py); runtime
    # addresses, meaningful only within one counted run, never serialized.
    reads: tuple[int, ...] = ()
    writes: tuple[tuple[int, int], ...] = ()  # (storage, bytes written)
    # The fp32 tensors it read, (storage, bytes), for what bf16 autocast would cast
    # (remedies/autocast_flow.py); same lifetime as `reads`.
    fp32_reads: tuple[tuple[int, int], ...] = ()
    # Every tensor it read, (storage, bytes): what a recompute from the call's inputs
    # would read (fusion_estimate.py); same lifetime as `reads`.
    read_sizes: tuple[tuple[int, int], ...] = ()
    # Where flops and bytes are unknown (a trace recorded without shapes), the regime its
    # time goes to, from what it is (a GEMM, a view) rather than a roofline; else None.
    regime_hint: str | None = None
    # Autograd recorded this op (grad mode on and an input requires grad): it paid for an
    # autograd node, the bookkeeping torch.inference_mode() removes (remedies/grad.py).
    autograd: bool = False


@dataclass
class OpTotals:
    calls: int = 0
    flops: int = 0
    bytes: int = 0

    def add(self, r: OpRecord) -> None:
        self.calls += 1
        self.flops += r.flops
        self.bytes += r.bytes


@dataclass
class CountResult:
    records: list[OpRecord] = field(default_factory=list)

    @property
    def total_flops(self) -> int:
        return sum(r.flops for r in self.records)

    @property
    def total_bytes(self) -> int:
        return sum(r.bytes for r in self.records)

    @property
    def uncounted_ops(self) -> list[str]:
        """Ops that ran with no FLOP formula (their bytes are still counted)."""
        return sorted({r.op for r in self.records if not r.has_formula})

    def by_op(self) -> dict[str, OpTotals]:
        return self._group(lambda r: r.op)

    def by_module(self) -> dict[str, OpTotals]:
        return self._group(lambda r: r.module)

    def by_class(self) -> dict[str, OpTotals]:
        return self._group(lambda r: r.op_class)

    def _group(self, key: Callable[[OpRecord], str]) -> dict[str, OpTotals]:
        out: dict[str, OpTotals] = {}
        for r in self.records:
            out.setdefault(key(r), OpTotals()).add(r)
        return out

    def to_dict(self) -> dict[str, Any]:
        return {
            "total_flops": self.total_flops,
            "total_bytes": self.total_bytes,
            "uncounted_ops": self.uncounted_ops,
            "by_op": {k: vars(v) for k, v in self.by_op().items()},
            "by_module": {k: vars(v) for k, v in self.by_module().items()},
        }


# ---------------------------------------------------------------- FLOP formulas


def _numel(t: Any) -> int:
    return t.numel() if isinstance(t, torch.Tensor) else 0


def _tensors(x: Any) -> list[torch.Tensor]:
    return [t for t in tree_flatten(x)[0] if isinstance(t, torch.Tensor)]


# Pointwise ops are 1 FLOP per output element, except these, whose count follows from
# their definition: addcmul/addcdiv = one multiply (or divide) + one add; lerp =
# start + weight * (end - start), three operations.
_POINTWISE_FLOPS_PER_ELEMENT = {"addcmul": 2, "addcdiv": 2, "lerp": 3}

# Softmax along a dim: max, subtract, exp, sum, divide = 5 operations per element.
# Backward (grad - sum(grad*y)) * y: multiply, sum, subtract, multiply = 4 per element.
# _safe_softmax is softmax whose fully masked rows give 0 rather than NaN (the attention
# math path's: on CPU a GPT-2 training step under SDPA with dropout ran it, counted as an
# "other" op with no formula and left out of the fusion estimate).
_SOFTMAX = {"_softmax": 5, "_log_softmax": 5, "_safe_softmax": 5,
            "_softmax_backward_data": 4, "_log_softmax_backward_data": 4}

# Element-wise math whose cost per element the calibration measures (hardware.py: exp
# and a row softmax, elements/s per dtype), by op: its kind. Only ops whose math per
# element is at least the probe's, so elements / the calibrated rate is a floor:
# - softmax: _softmax; _log_softmax makes the same passes over the row (max, exp, sum)
#   with a log per row in place of a divide per element. NB: backward is not calibrated.
# - exp: exp, exp2, expm1; sigmoid = 1 / (1 + exp(-x)) and silu = x * sigmoid(x) compute
#   one exponential and more. (tanh, erf/GELU: costs not established against exp; left out.)
_MATH_KIND = {"_softmax": "softmax", "_log_softmax": "softmax",
              "_safe_softmax": "softmax", "exp": "exp",
              "exp2": "exp", "expm1": "exp", "sigmoid": "exp", "silu": "exp"}

# Normalizations: fvcore's convention (fvcore/nn/jit_handles.py, norm_flop_counter):
# 5 FLOPs per input element with an affine transform, 4 without. RMS norm has no mean
# subtraction: square, sum, scale, weight = 4 (3 without weight).
# NB: backward is counted as 2x the forward formula, an approximation (the backward of a
# normalization recomputes the statistics and forms two reductions over the gradient).
_NORMS = {  # op: (index of its weight argument, FLOPs/element with weight, without)
    "native_layer_norm": (2, 5, 4), "native_group_norm": (1, 5, 4),
    "native_batch_norm": (1, 5, 4), "_native_batch_norm_legit": (1, 5, 4),
    "_native_batch_norm_legit_no_training": (1, 5, 4), "cudnn_batch_norm": (1, 5, 4),
    "miopen_batch_norm": (1, 5, 4), "_fused_rms_norm": (2, 4, 3),
    "native_layer_norm_backward": (5, 10, 8), "native_group_norm_backward": (4, 10, 8),
    "native_batch_norm_backward": (2, 10, 8), "cudnn_batch_norm_backward": (2, 10, 8),
    "_fused_rms_norm_backward": (4, 8, 6),
}

# Reductions: one combine per input element (sum, max, ...). var/std: subtract the mean,
# square, accumulate = 3 per element.
_REDUCTIONS = {
    "sum": 1, "mean": 1, "amax": 1, "amin": 1, "max": 1, "min": 1, "prod": 1,
    "argmax": 1, "argmin": 1, "any": 1, "all": 1, "cumsum": 1, "logsumexp": 3,
    "norm": 2, "linalg_vector_norm": 2, "var": 3, "std": 3, "var_mean": 3, "std_mean": 3,
    "nll_loss_forward": 1, "nll_loss2d_forward": 1, "mse_loss": 3,
}

# Ops that move data and do no arithmetic.
_COPIES = {
    "copy_", "_to_copy", "clone", "contiguous", "cat", "stack", "index_select", "gather",
    "embedding", "index", "fill_", "zero_", "zeros", "ones", "full", "zeros_like",
    "ones_like", "full_like", "scatter", "constant_pad_nd", "_foreach_copy_", "repeat",
    "split_with_sizes_copy", "slice_scatter", "select_scatter", "new_zeros", "new_ones",
    "_local_scalar_dense", "masked_fill", "masked_fill_", "where", "randn", "rand",
    "randn_like", "rand_like", "normal_", "uniform_", "bernoulli_", "native_dropout",
    "lift_fresh", "_unsafe_index", "expand_copy", "permute_copy", "transpose_copy",
    "index_put_", "index_put", "tril", "triu", "flip", "roll", "arange",
}
# Allocation without writes: no bytes.
_ALLOCS = {"empty", "empty_like", "empty_strided", "new_empty", "new_empty_strided",
           "resize_", "set_"}
# Gathers read only the rows they return: indices + rows read + rows written.
_GATHERS = {"embedding", "index_select", "_unsafe_index", "index"}

# Fused optimizer kernels. NB: approximate: Adam's update per parameter element is about
# 14 operations (two moving averages 3+4, bias corrections 2, sqrt, eps add, divide,
# scaled update 2); SGD with momentum about 4.
_FUSED_OPTIMIZERS = {"_fused_adam_": 14, "_fused_adamw_": 15, "_fused_sgd_": 4}


def _matmul_class(packet_name: str) -> str:
    if "conv" in packet_name:
        return "conv"
    if "attention" in packet_name or "flash" in packet_name:
        return "attention"
    return "matmul"


def _has_tag(func: Any, name: str) -> bool:
    tag = getattr(torch.Tag, name, None)
    return tag is not None and tag in getattr(func, "tags", ())


def _aliased_formula(name: str) -> Any:
    """torch's formula for an op it has none for, where the math is the same: the CPU
    flash-attention kernels (same FLOPs as the CUDA flash kernels; the formula reads only
    the query, key, value (and grad) shapes, which come first in both)."""
    from torch.utils.flop_counter import flop_registry

    twin = {"_scaled_dot_product_flash_attention_for_cpu":
            aten._scaled_dot_product_flash_attention,
            "_scaled_dot_product_flash_attention_for_cpu_backward":
            aten._scaled_dot_product_flash_attention_backward}.get(name)
    return None if twin is None else flop_registry.get(twin)


def _gqa_expanded(args: tuple) -> tuple:
    """Attention arguments with every 4-D [B, H, S, E] tensor of fewer heads than the
    query replaced by a meta tensor of the query's head count (no data, no memory)."""
    four_d = [a for a in args if isinstance(a, torch.Tensor) and a.dim() == 4]
    heads = max((a.shape[1] for a in four_d), default=0)
    return tuple(torch.empty((a.shape[0], heads, *a.shape[2:]), dtype=a.dtype, device="meta")
                 if isinstance(a, torch.Tensor) and a.dim() == 4 and a.shape[1] < heads
                 and heads % a.shape[1] == 0 else a for a in args)


def _mha_flops(args: tuple) -> int | None:
    """`aten::_native_multi_head_attention` (nn.MultiheadAttention's inference fast path,
    torchvision's ViT among its users): one op holding the q/k/v input projections, both
    attention matmuls and the output projection, which torch has no formula for. Dense
    query [B, L, E] and key/value [B, S, E]: 2BLE^2 (q) + 2 x 2BSE^2 (k, v) + 2BLSE
    (QK^T) + 2BLSE (AV) + 2BLE^2 (out). Counted as nothing, ViT-B/16's 12 calls at batch
    32 (about 400 GFLOP, 37% of its time on the H200) read as memory-bound, and no
    precision remedy predicted a gain from them. None: not dense 3-D (a nested tensor)."""
    q, k = args[0], args[1]
    if not all(isinstance(t, torch.Tensor) and t.dim() == 3 and not t.is_nested
               for t in (q, k)):
        return None
    b, seq_q, e = q.shape
    seq_kv = k.shape[1]
    return 4 * b * seq_q * e * e + 4 * b * seq_kv * e * e + 4 * b * seq_q * seq_kv * e


def _classify_and_flops(
    func: Any, name: str, args: tuple, kwargs: dict, out: Any
) -> tuple[str, int, bool]:
    """(op_class, flops, has_formula)."""
    from torch.utils.flop_counter import flop_registry

    if name == "_native_multi_head_attention":
        flops = _mha_flops(args)
        return "attention", flops or 0, flops is not None
    packet = func.overloadpacket
    formula = flop_registry.get(packet) or _aliased_formula(name)
    if formula is not None:
        try:
            return _matmul_class(name), int(formula(*args, **kwargs, out_val=out)), True
        except (AssertionError, RuntimeError, TypeError):
            # torch's attention formula (2.11) asserts equal query and key/value heads:
            # grouped-query attention (LLaMA-style) repeats each key/value head for
            # Hq/Hkv query heads, so count it as that many full heads.
            if "scaled_dot_product" in name:
                try:
                    return (_matmul_class(name),
                            int(formula(*_gqa_expanded(args), **kwargs, out_val=out)), True)
                except (AssertionError, RuntimeError, TypeError):
                    pass
            return _matmul_class(name), 0, False
    if func.is_view or name in ("detach", "alias", "_unsafe_view", "lift_fresh"):
        return "view", 0, True
    if name in _ALLOCS:
        return "copy", 0, True
    if name in _COPIES:
        return "copy", 0, True
    if name in _SOFTMAX:
        return "softmax", _SOFTMAX[name] * _numel(args[0]), True
    if name in _NORMS:
        w_idx, with_affine, without = _NORMS[name]
        # args[0] is the input (or, in backward, the gradient of the same shape).
        weight = args[w_idx] if len(args) > w_idx else None
        per = with_affine if isinstance(weight, torch.Tensor) else without
        return "norm", per * _numel(args[0]), True
    if name in _FUSED_OPTIMIZERS:
        params = args[0] if args else []
        return "optimizer", _FUSED_OPTIMIZERS[name] * sum(_numel(p) for p in params), True
    if name.startswith("_foreach_"):
        base = name[len("_foreach_"):].rstrip("_")
        per = _POINTWISE_FLOPS_PER_ELEMENT.get(base, 1)
        first = args[0] if args else []
        n = sum(_numel(t) for t in first) if isinstance(first, (list, tuple)) else 0
        return "pointwise", per * n, True
    base = name.rstrip("_")
    if _has_tag(func, "pointwise") or base in _POINTWISE_FLOPS_PER_ELEMENT:
        outs = _tensors(out) or _tensors(args[:1])
        per = _POINTWISE_FLOPS_PER_ELEMENT.get(base, 1)
        return "pointwise", per * sum(t.numel() for t in outs), True
    if base in _REDUCTIONS:
        return "reduction", _REDUCTIONS[base] * _numel(args[0]), True
    if _has_tag(func, "reduction"):
        return "reduction", _numel(args[0]), True
    return "other", 0, False


def math_elements(op: str, flops: int) -> tuple[str, int] | None:
    """(kind, elements) of an op whose element-wise math is calibrated (_MATH_KIND), or
    None. Elements are its FLOPs over the FLOPs per element its formula above credits, so
    a record counted here and one rebuilt from a trace's shapes (tracecount.py) agree."""
    name = op.removeprefix("aten::")
    base = name.rstrip("_")
    kind = _MATH_KIND.get(name) or _MATH_KIND.get(base)
    if kind is None or flops <= 0:
        return None
    per = _SOFTMAX[name] if name in _SOFTMAX else _POINTWISE_FLOPS_PER_ELEMENT.get(base, 1)
    return kind, flops // per


# ---------------------------------------------------------------- byte counting


def _distinct_bytes(t: torch.Tensor) -> int:
    """Bytes of a tensor's distinct elements: a stride-0 (broadcast) dim repeats data."""
    if t.numel() == 0:
        return 0
    n = 1
    for size, stride in zip(t.shape, t.stride(), strict=True):
        if stride != 0:
            n *= size
    return n * t.element_size()


def _storage_key(t: torch.Tensor) -> tuple[int, Any, tuple[int, ...], tuple[int, ...]]:
    return _storage_ptr(t), t.storage_offset(), tuple(t.shape), tuple(t.stride())


def _storage_ptr(t: torch.Tensor) -> int:
    try:
        ptr = t.untyped_storage().data_ptr()
    except (RuntimeError, NotImplementedError):
        return id(t)
    # Meta tensors (rebuilt from a trace's recorded shapes, tracecount.py) all have
    # address 0: each stands for a storage of its own, or two inputs would count once.
    return id(t) if ptr == 0 and t.device.type == "meta" else ptr


def _bytes(func: Any, name: str, op_class: str, args: tuple, kwargs: dict, out: Any,
           io: list[Any]) -> int:
    """Minimum bytes; also fills io with (read storages, [(written storage, bytes)],
    [(fp32 read storage, bytes)], [(read storage, bytes)])."""
    if op_class == "view" or name in _ALLOCS:
        return 0
    schema_args = func._schema.arguments
    read: dict[Any, torch.Tensor] = {}
    written: dict[Any, torch.Tensor] = {}
    bound = list(args) + [kwargs.get(a.name) for a in schema_args[len(args):]]
    for arg_schema, value in zip(schema_args, bound, strict=False):
        tensors = _tensors(value)
        alias = arg_schema.alias_info
        is_write = alias is not None and alias.is_write
        for t in tensors:
            key = _storage_key(t)
            if is_write:
                written[key] = t
            # `out=` arguments are keyword-only and only written, never read.
            if not (is_write and arg_schema.kwarg_only):
                read[key] = t
    for t in _tensors(out):
        key = _storage_key(t)
        if key not in written and key not in read:
            written[key] = t
    io.append(tuple({_storage_ptr(t) for t in read.values()}))
    io.append(tuple((_storage_ptr(t), _distinct_bytes(t)) for t in written.values()))
    io.append(tuple((_storage_ptr(t), _distinct_bytes(t)) for t in read.values()
                    if t.dtype == torch.float32))
    io.append(tuple((_storage_ptr(t), _distinct_bytes(t)) for t in read.values()))
    if name in _GATHERS:
        # Only the gathered rows are read from the table: indices + output-sized read.
        idx_bytes = sum(_distinct_bytes(t) for t in read.values()
                        if not t.is_floating_point())
        out_bytes = sum(_distinct_bytes(t) for t in written.values())
        return idx_bytes + 2 * out_bytes
    return sum(_distinct_bytes(t) for t in read.values()) + sum(
        _distinct_bytes(t) for t in written.values()
    )


def _out_dtype(args: tuple, out: Any) -> str:
    ts = _tensors(out) or _tensors(args)
    floats = [t for t in ts if t.is_floating_point()]
    return dtype_name((floats or ts)[0].dtype) if ts else "none"


def _tensor_core_unit(op_class: str, dtype: str, device_type: str) -> str | None:
    if op_class not in MATMUL_CLASSES:
        return None
    if dtype in ("bf16", "fp16"):
        return dtype
    if dtype == "fp32" and device_type == "cuda":
        # TF32 is used when the user's settings allow it (convs: on by default).

        return "tf32" if tf32_enabled("conv" if op_class == "conv" else "matmul") else "fp32"
    return dtype


# ---------------------------------------------------------------- the dispatch mode

# Profiler range markers (e.g. Optimizer.step's record_function): bookkeeping, not work.
_MARKERS = {"_record_function_enter", "_record_function_enter_new", "_record_function_exit"}


class _Scope:
    """Labels ops run inside an optimizer's step() (global optimizer hooks)."""

    def __init__(self) -> None:
        self.optimizer: str | None = None


@contextmanager
def _optimizer_scope(scope: _Scope) -> Iterator[None]:
    from torch.optim.optimizer import (
        register_optimizer_step_post_hook,
        register_optimizer_step_pre_hook,
    )

    def pre(opt: Any, *_: Any) -> None:
        scope.optimizer = f"optimizer.{type(opt).__name__}"

    def post(opt: Any, *_: Any) -> None:
        scope.optimizer = None

    h1 = register_optimizer_step_pre_hook(pre)
    h2 = register_optimizer_step_post_hook(post)
    try:
        yield
    finally:
        h1.remove()
        h2.remove()


def _decomposable(func: Any) -> bool:
    """An op with a CompositeImplicitAutograd kernel that torch has no FLOP formula for."""
    from torch.utils.flop_counter import flop_registry

    return (func.overloadpacket not in flop_registry
            and torch._C._dispatch_has_kernel_for_dispatch_key(
                func.name(), "CompositeImplicitAutograd"))


class _CountingMode(TorchDispatchMode):
    def __init__(self, result: CountResult, tracker: Any, scope: _Scope,
                 mark_ranges: bool = False) -> None:
        super().__init__()
        # (func, args, kwargs) per record, for replaying ops one by one (trace.py)
        self.calls: list[tuple[Any, tuple, dict]] | None = None
        self.result = result
        self.tracker = tracker
        self.scope = scope
        self.mark_ranges = mark_ranges

    def _module(self) -> str:
        parents = self.tracker.parents if self.tracker is not None else {"Global"}
        # ModuleTracker keeps a set of dotted paths; the innermost is the deepest one.
        return max(parents, key=lambda p: (p.count("."), len(p)))

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[override]
        kwargs = kwargs or {}
        if any(getattr(t, "__name__", "") == "DTensor" for t in types):
            # FSDP2's sharded parameters (the optimizer's ops): the DTensor runs the op
            # on its local shard, and those local ops come back through this mode, so
            # each is counted on the shard this rank holds, not the global shape
            return NotImplemented
        name = func.overloadpacket.__name__
        if name in _MARKERS:
            return func(*args, **kwargs)
        if _decomposable(func):
            # Under inference_mode, composite ops (aten::linear, matmul, the SDPA front)
            # reach this mode before autograd has decomposed them: count the ops they run
            # (aten::linear was counted as 0 FLOPs; torch's FlopCounterMode does the same)
            with self:
                decomposed = func.decompose(*args, **kwargs)
            if decomposed is not NotImplemented:
                return decomposed
        if self.mark_ranges:
            # A profiler range per op, so trace.py can map each kernel to this record.
            with torch.profiler.record_function(f"{RANGE_PREFIX}{len(self.result.records)}"):
                out = func(*args, **kwargs)
        else:
            out = func(*args, **kwargs)
        op_class, flops, has_formula = _classify_and_flops(func, name, args, kwargs, out)
        io: list[Any] = []
        nbytes = _bytes(func, name, op_class, args, kwargs, out, io)
        dtype = _out_dtype(args, out)
        tensors = _tensors(out) or _tensors(args)
        device_type = tensors[0].device.type if tensors else "cpu"
        if self.scope.optimizer is not None:
            module, phase = self.scope.optimizer, OPTIMIZER
        else:
            module = self._module()
            phase = BACKWARD if torch._C._current_graph_task_id() != -1 else FORWARD
        first_out = _tensors(out)
        if self.calls is not None:
            self.calls.append((func, args, kwargs))
        self.result.records.append(
            OpRecord(
                index=len(self.result.records),
                op=f"{getattr(func, 'namespace', 'aten')}::{name}",  # c10d:: collectives
                module=module,
                phase=phase,
                op_class=op_class,
                dtype=dtype,
                flops=flops if math.isfinite(flops) else 0,
                bytes=nbytes,
                tensor_core_unit=_tensor_core_unit(op_class, dtype, device_type),
                has_formula=has_formula,
                out_shape=tuple(first_out[0].shape) if first_out else (),
                reads=io[0] if io else (),
                writes=io[1] if io else (),
                fp32_reads=io[2] if io else (),
                read_sizes=io[3] if io else (),
                autograd=phase == FORWARD and torch.is_grad_enabled() and any(
                    t.requires_grad for t in _tensors((args, kwargs))),
            )
        )
        return out


def count(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> CountResult:
    """Run `fn(*args, **kwargs)` once and count every aten op it runs.

    Module paths come from `torch.utils.module_tracker.ModuleTracker` (named from the
    root module's class, e.g. "MLP.0"); ops inside an optimizer's `step()` are labelled
    "optimizer.<Class>".
    """
    return count_marked(fn, *args, mark_ranges=False, **kwargs)


def count_marked(fn: Callable[..., Any], *args: Any, mark_ranges: bool,
                 **kwargs: Any) -> CountResult:
    """`count`, optionally wrapping each op in a profiler range named
    f"{RANGE_PREFIX}{record.index}" (for a profiled run; see trace.py)."""
    result, _ = _run_counted(fn, args, kwargs, mark_ranges=mark_ranges)
    return result


def count_with_calls(fn: Callable[..., Any], *args: Any, **kwargs: Any
                     ) -> tuple[CountResult, list[tuple[Any, tuple, dict]]]:
    """`count`, also returning each op's (func, args, kwargs) so it can be replayed.
    NB: holds references to every op's inputs until the caller drops the list."""
    return _run_counted(fn, args, kwargs, mark_ranges=False, keep_calls=True)


def _run_counted(fn: Callable[..., Any], args: tuple, kwargs: dict, *, mark_ranges: bool,
                 keep_calls: bool = False
                 ) -> tuple[CountResult, list[tuple[Any, tuple, dict]]]:
    from torch.utils.module_tracker import ModuleTracker

    result = CountResult()
    scope = _Scope()
    tracker = ModuleTracker()
    mode = _CountingMode(result, tracker, scope, mark_ranges)
    if keep_calls:
        mode.calls = []
    with warnings.catch_warnings():
        # torch warns that a compiled module's hooks fire twice under global module
        # hooks (ModuleTracker's): under the eager stance the compiled wrapper only
        # forwards to the eager module, whose hooks fire once.
        warnings.filterwarnings("ignore", message=".*global hooks on modules.*")
        with _eager(), tracker, _optimizer_scope(scope), mode:
            fn(*args, **kwargs)
    return result, mode.calls or []


def _eager() -> Any:
    """Compiled code runs as its eager twin while counted: no compile, and no recompile of
    the user's compiled code (ModuleTracker's global hooks would fail its guards). torch
    < 2.6 has no stance: there dynamo skips frames under a dispatch mode by itself."""
    import contextlib

    set_stance = getattr(torch.compiler, "set_stance", None)
    return set_stance("force_eager") if set_stance is not None else contextlib.nullcontext()


def count_op(func: Any, args: tuple, kwargs: dict, *, run: bool = True) -> list[OpRecord]:
    """Count one aten op call with the formulas `count` uses: the records of what the
    dispatch mode saw (one, or the parts of an op that decomposes). For ops rebuilt from
    a profiler trace on meta tensors (tracecount.py): module and phase are left to the
    caller ("Global", "forward"). run=False: the op is not run (one that needs data, such
    as `_local_scalar_dense`): one record from its inputs alone, outputs not counted."""
    result = CountResult()
    if run:
        with _CountingMode(result, None, _Scope()):
            func(*args, **kwargs)
        return result.records
    name = func.overloadpacket.__name__
    op_class, flops, has_formula = _classify_and_flops(func, name, args, kwargs, None)
    nbytes = _bytes(func, name, op_class, args, kwargs, None, [])
    dtype = _out_dtype(args, None)
    tensors = _tensors(args)
    device_type = tensors[0].device.type if tensors else "cpu"
    return [OpRecord(index=0, op=f"aten::{name}", module="Global", phase=FORWARD,
                     op_class=op_class, dtype=dtype,
                     flops=flops if math.isfinite(flops) else 0, bytes=nbytes,
                     tensor_core_unit=_tensor_core_unit(op_class, dtype, device_type),
                     has_formula=has_formula)]
