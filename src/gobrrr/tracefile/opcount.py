"""FLOPs and minimum bytes of an op recorded in a profiler trace, by the formulas of
`gobrrr.count`.

A trace recorded with `record_shapes=True` lists each op's arguments ("Input Dims",
"Input type", "Input Strides", "Concrete Inputs"). The op's overload is the one whose
schema matches those arguments; its tensors are rebuilt as meta tensors (shape, strides,
dtype: no memory, no data), its scalars from their recorded values, and the op runs once
under counting.py's dispatch mode (`count_op`): the same FLOP formulas and byte rules as
a live `gobrrr doctor`, with nothing computed.

An op that cannot run on meta tensors (it needs data, such as `_local_scalar_dense`) is
counted from its inputs alone, outputs left out. Where nothing can be done (an op outside
aten, a schema the recorded arguments do not match), the op's bytes are its recorded
tensor inputs read once (outputs unknown), it has no FLOP formula, and it is listed as
such. A trace without shapes gives no FLOPs and no bytes at all: the op carries a regime
hint (GEMM-like ops compute, views overhead, the rest memory) instead of a roofline; so
does an op whose recorded arguments give no size at all (a tensor list recorded without
its tensors' shapes, as torch 2.11 records the foreach ops of an optimizer step). An
undefined tensor argument records as "" and is rebuilt as None, also where the schema says
Tensor rather than Tensor?.

Not recorded, so assumed: the dtype of the tensors in a tensor list (that of the op's other
tensors, else fp32); tensor device (all on the device that ran the op); aliasing between
arguments (two arguments that were one tensor count twice: bytes are an upper bound
there).
"""

from __future__ import annotations

import ast
import math
from dataclasses import dataclass
from functools import cache
from typing import Any

import torch

from gobrrr.counting import count_op, dtype_name
from gobrrr.recorded import (
    PROFILER_DTYPES,
    is_inductor_kernel,
    kernel_args_bytes,
    kernel_elements,
    matmul_flops,
    op_class_by_name,
)
from gobrrr.tracefile.columns import RecordedArgs

__all__ = ["OpCount", "count_recorded", "decomposes", "is_op_name", "output_of",
           "tensor_inputs", "PROFILER_DTYPES"]

_ITEMSIZE = {dtype_name(d): d.itemsize for d in PROFILER_DTYPES.values()}  # by gobrrr's names
# ScalarType codes, as "Concrete Inputs" writes a dtype argument (c10/core/ScalarType.h).
_SCALAR_TYPES: dict[int, torch.dtype] = {
    0: torch.uint8, 1: torch.int8, 2: torch.int16, 3: torch.int32, 4: torch.int64,
    5: torch.float16, 6: torch.float32, 7: torch.float64, 9: torch.complex64,
    10: torch.complex128, 11: torch.bool, 15: torch.bfloat16, 23: torch.float8_e5m2,
    24: torch.float8_e4m3fn,
}
_MEMORY_FORMATS = {0: torch.contiguous_format, 1: torch.preserve_format,
                   2: torch.channels_last, 3: torch.channels_last_3d}
_SCALAR_SCHEMA_TYPES = {"int", "SymInt", "float", "bool", "number", "ScalarType", "Layout",
                        "MemoryFormat"}
# Namespaces of profiler events that are not ops (autograd nodes, their wrappers).
_NOT_OP_NAMESPACES = {"autograd", "torch"}


@dataclass(frozen=True)
class OpCount:
    op_class: str
    dtype: str
    flops: int
    bytes: int
    has_formula: bool
    tensor_core_unit: str | None
    # "meta": rebuilt and counted; "shapes": input bytes only; "none": no shapes;
    # "kernel": an Inductor kernel, by its name and its tensors (recorded.py)
    method: str
    regime_hint: str | None = None  # set when flops and bytes are unknown ("none")
    # the rebuilt op's output (method "meta"), for traceflow's guessed tensor identities
    out_shape: tuple[int, ...] | None = None


class _CannotRebuild(Exception):
    pass


def is_op_name(name: str) -> bool:
    """An operator ("aten::mm", "c10d::allreduce_", "mylib::op") or a kernel Inductor
    launched under its own name ("triton_poi_fused_add_0": compiled code has no ATen op
    around it), not an autograd node, a record_function range or a Python frame."""
    if is_inductor_kernel(name):
        return True
    ns, sep, op = name.partition("::")
    return bool(sep) and ns.isidentifier() and ns not in _NOT_OP_NAMESPACES and \
        op.replace(".", "_").isidentifier()


@cache
def _packet(name: str) -> Any:
    ns, _, op = name.partition("::")
    if ns != "aten":
        return None
    return getattr(torch.ops.aten, op.split(".")[0], None)


def _base(schema_type: str) -> tuple[bool, str]:
    if schema_type.startswith("Optional[") and schema_type.endswith("]"):
        return True, schema_type[len("Optional["):-1]
    return False, schema_type


def _compatible(schema_type: str, recorded: str) -> int:
    """How well one recorded argument fits one schema argument: -1 not at all, 0 loosely
    (nothing recorded), 2 exactly."""
    optional, base = _base(schema_type)
    tensor_list = base.startswith("List[") and "Tensor" in base
    if recorded == "":
        # An undefined tensor records as "" even where the schema says Tensor, not
        # Tensor? (attn_bias of _scaled_dot_product_efficient_attention_backward).
        return -1 if tensor_list and not optional else 0
    if base == "Tensor":
        return 2 if recorded in PROFILER_DTYPES else -1
    if tensor_list:
        return 2 if recorded in ("TensorList", "GenericList") else -1
    if base.startswith("List["):
        return 2 if recorded in ("ScalarList", "GenericList") else -1
    if base in _SCALAR_SCHEMA_TYPES:
        return 2 if recorded == "Scalar" else -1
    return 0 if recorded not in PROFILER_DTYPES and recorded != "TensorList" else -1


def _overload(name: str, args: RecordedArgs) -> Any:
    """The overload of `name` whose schema the recorded arguments match best, or None."""
    packet = _packet(name)
    if packet is None:
        return None
    best: tuple[int, Any] | None = None
    for ov_name in packet.overloads():
        ov = getattr(packet, ov_name)
        schema_args = ov._schema.arguments
        if len(schema_args) != len(args.types):
            continue
        scores = [_compatible(str(a.real_type), t) for a, t in zip(schema_args, args.types,
                                                                  strict=True)]
        if min(scores, default=0) < 0:
            continue
        if best is None or sum(scores) > best[0]:
            best = (sum(scores), ov)
    return best[1] if best else None


@cache
def _decomposes_by_name(name: str) -> bool:
    packet = _packet(name)
    if packet is None:
        return False
    key = torch._C.DispatchKey.CompositeImplicitAutograd
    ovs = [getattr(packet, o) for o in packet.overloads()]
    return bool(ovs) and all(o.has_kernel_for_dispatch_key(key) for o in ovs)


def decomposes(name: str, args: RecordedArgs | None) -> bool:
    """Whether autograd decomposes the op before a dispatch mode sees it
    (CompositeImplicitAutograd, e.g. aten::linear -> aten::t + aten::addmm): such an op is
    not counted itself, the ops recorded inside it are."""
    ov = _overload(name, args) if args is not None else None
    if ov is None:
        return _decomposes_by_name(name)
    return bool(ov.has_kernel_for_dispatch_key(torch._C.DispatchKey.CompositeImplicitAutograd))


def _meta_tensor(dims: Any, strides: Any, dtype: torch.dtype) -> torch.Tensor:
    if not isinstance(dims, list) or not all(isinstance(d, int) and d >= 0 for d in dims):
        raise _CannotRebuild(f"dims {dims!r}")
    if isinstance(strides, list) and len(strides) == len(dims) and \
            all(isinstance(s, int) and s >= 0 for s in strides):
        return torch.empty_strided(dims, strides, dtype=dtype, device="meta")
    return torch.empty(dims, dtype=dtype, device="meta")


def _parse(text: str) -> Any:
    if text in ("True", "False"):
        return text == "True"
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError):
        raise _CannotRebuild(f"value {text!r}") from None


def _value(arg: Any, recorded: str, dims: Any, strides: Any, concrete: str,
           list_dtype: torch.dtype) -> Any:
    optional, base = _base(str(arg.real_type))
    if base == "Tensor":
        return None if recorded == "" else _meta_tensor(dims, strides, PROFILER_DTYPES[recorded])
    if base.startswith("List[") and "Tensor" in base:
        if recorded == "" or not isinstance(dims, list):
            return None
        strides_list = strides if isinstance(strides, list) and len(strides) == len(dims) \
            else [None] * len(dims)
        return [_meta_tensor(d, s, list_dtype) for d, s in zip(dims, strides_list,
                                                                strict=True)]
    if base == "Device":
        return torch.device("meta")  # whatever device it named: nothing is allocated
    if concrete == "":
        if arg.has_default_value():
            return arg.default_value
        if optional:
            return None
        if base == "Layout":
            return torch.strided
        raise _CannotRebuild(f"no value for {arg.name}")
    v = _parse(concrete)
    if base == "ScalarType":
        if v not in _SCALAR_TYPES:
            raise _CannotRebuild(f"dtype code {v!r}")
        return _SCALAR_TYPES[v]
    if base == "MemoryFormat":
        return _MEMORY_FORMATS.get(v, torch.contiguous_format)
    if base == "Layout":
        return torch.strided
    if base == "bool":
        return bool(v)
    if base in ("int", "SymInt"):
        return int(v)
    if base == "float":
        return float(v)
    return v


def _arguments(ov: Any, args: RecordedArgs) -> tuple[list[Any], dict[str, Any]]:
    n = len(args.types)
    dims = args.dims if isinstance(args.dims, list) and len(args.dims) == n else [[]] * n
    strides = args.strides if isinstance(args.strides, list) and len(args.strides) == n \
        else [None] * n
    concrete = args.concrete if isinstance(args.concrete, list) and len(args.concrete) == n \
        else [""] * n
    # A tensor list's dtype is not recorded: that of the op's other tensors, else fp32.
    list_dtype = next((PROFILER_DTYPES[t] for t in args.types if t in PROFILER_DTYPES),
                      torch.float32)
    positional: list[Any] = []
    kwargs: dict[str, Any] = {}
    for arg, t, d, s, c in zip(ov._schema.arguments, args.types, dims, strides, concrete,
                               strict=True):
        v = _value(arg, t, d, s, c if isinstance(c, str) else "", list_dtype)
        if arg.kwarg_only:
            kwargs[arg.name] = v
        else:
            positional.append(v)
    return positional, kwargs


def _shape_bytes(args: RecordedArgs) -> tuple[int, str]:
    """Bytes of the recorded tensor inputs (each distinct element once), and their dtype."""
    total = 0
    dtype = "none"
    list_dtype = next((t for t in args.types if t in PROFILER_DTYPES), "float")
    for i, t in enumerate(args.types):
        dims = args.dims[i] if i < len(args.dims) else []
        if t in PROFILER_DTYPES:
            tensors = [(dims, PROFILER_DTYPES[t])]
            dtype = dtype if dtype != "none" else dtype_name(PROFILER_DTYPES[t])
        elif t == "TensorList" and isinstance(dims, list):
            tensors = [(d, PROFILER_DTYPES[list_dtype]) for d in dims]
        else:
            continue
        for shape, dt in tensors:
            if isinstance(shape, list) and all(isinstance(x, int) for x in shape):
                total += math.prod(shape) * dt.itemsize
    return total, dtype


def output_of(c: OpCount) -> tuple[tuple[int, ...], str, int] | None:
    """(shape, dtype name, bytes) of the op's result where it was rebuilt, else None."""
    if c.out_shape is None:
        return None
    return c.out_shape, c.dtype, math.prod(c.out_shape) * _ITEMSIZE.get(c.dtype, 4)


def tensor_inputs(args: RecordedArgs | None) -> list[tuple[tuple[int, ...], str]]:
    """(shape, gobrrr dtype name) of each recorded tensor argument, in order (tensor
    lists and arguments without whole shapes left out)."""
    if args is None:
        return []
    out = []
    for i, t in enumerate(args.types):
        dims = args.dims[i] if i < len(args.dims) else None
        if t in PROFILER_DTYPES and isinstance(dims, list) and all(isinstance(x, int)
                                                                   for x in dims):
            out.append((tuple(dims), dtype_name(PROFILER_DTYPES[t])))
    return out


def _unsized_list(args: RecordedArgs) -> bool:
    """A tensor-list argument recorded without its tensors' shapes (torch 2.11 records
    `TensorList` with dims [], as for the foreach ops of an optimizer step)."""
    for i, t in enumerate(args.types):
        dims = args.dims[i] if i < len(args.dims) else None
        if t in ("TensorList", "GenericList") and not (isinstance(dims, list) and dims):
            return True
    return False


def _regime_hint(name: str) -> str:
    from torch.utils.flop_counter import flop_registry

    packet = _packet(name)
    if packet is not None and packet in flop_registry:
        return "compute"
    if packet is not None and all(getattr(packet, o).is_view for o in packet.overloads()):
        return "overhead"
    return "memory"


def _count_kernel(name: str, args: RecordedArgs | None) -> OpCount:
    """An Inductor kernel, as the live compiled path counts it (recorded.py): its class
    from its name, its bytes from its tensor arguments (inputs and outputs, each at most
    the elements its recorded sizes say it computes), FLOPs for a
    template GEMM whose operand shapes say them. Without shapes: its class's regime."""
    op_class = op_class_by_name(name)
    if args is None:
        hint = "compute" if op_class == "matmul" else "memory"
        return OpCount(op_class, "none", 0, 0, False, None, "none", hint)
    tensors = [(d, t) for d, t in zip(args.dims, args.types, strict=False)
               if t in PROFILER_DTYPES and isinstance(d, list) and len(d) > 0
               and all(isinstance(n, int) and n >= 0 for n in d)]
    flops = matmul_flops(name, tensors) if op_class == "matmul" else None
    dtype = dtype_name(PROFILER_DTYPES[tensors[0][1]]) if tensors else "none"
    unit = dtype if op_class == "matmul" else None
    nbytes = kernel_args_bytes(tensors, kernel_elements(args.types, args.concrete))
    return OpCount(op_class, dtype, flops or 0, nbytes, flops is not None
                   or op_class != "matmul", unit, "kernel",
                   regime_hint=None if tensors else "memory")


def count_recorded(name: str, args: RecordedArgs | None) -> OpCount:
    """The op's FLOPs and minimum bytes from its recorded arguments (module docstring)."""
    if is_inductor_kernel(name):
        return _count_kernel(name, args)
    if args is None:
        return OpCount("other", "none", 0, 0, False, None, "none", _regime_hint(name))
    # Rebuilt, its lists would be empty: no work at all. It is counted as not rebuilt.
    unsized = _unsized_list(args)
    ov = None if unsized else _overload(name, args)
    records: list[Any] | None = None
    run_ok = False
    if ov is not None:
        try:
            positional, kwargs = _arguments(ov, args)
            with torch.device("meta"):
                try:
                    records = count_op(ov, tuple(positional), kwargs)
                    run_ok = True
                except Exception:  # no meta kernel, or it needs data (item, nonzero)
                    records = count_op(ov, tuple(positional), kwargs, run=False)
        except Exception:  # arguments that cannot be rebuilt, or no formula applies
            records = None
        if records == []:
            # It ran and no dispatch mode would see it (e.g. detach_, handled above the
            # Python key): it moves nothing, like a view.
            return OpCount("view", "none", 0, 0, True, None, "meta")
        if records:
            main = max(records, key=lambda r: (r.flops, r.bytes))
            # the last record made the op's result (an op that decomposes in the mode)
            return OpCount(main.op_class, main.dtype, sum(r.flops for r in records),
                           sum(r.bytes for r in records),
                           all(r.has_formula for r in records), main.tensor_core_unit, "meta",
                           out_shape=records[-1].out_shape if run_ok else None)
    nbytes, dtype = _shape_bytes(args)
    if unsized or nbytes == 0:
        # Nothing of its size recorded (AdamW's foreach ops: their lists' shapes are not):
        # the regime from what it is, as for a trace without shapes.
        return OpCount("other", dtype, 0, 0, False, None, "shapes", _regime_hint(name))
    return OpCount("other", dtype, 0, nbytes, False, None, "shapes")
