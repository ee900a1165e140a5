"""The work of an op or a kernel known only by its name and the (shape, dtype) arguments
the profiler recorded for it: the profiler's dtype names, and the class, FLOPs and bytes
of Inductor's Triton kernels (a `triton_poi_fused_add_cos_sin_0` event around each
launch, its tensors as its arguments) and of the extern ATen calls inside compiled code.
One source for the live compiled path (compiled.py) and for traces (tracefile/opcount.py),
so a compiled kernel counts the same in both."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import torch

__all__ = ["PROFILER_DTYPES", "Args", "COMPILED_GRAPH_RANGES", "is_inductor_kernel",
           "op_class_by_name", "matmul_flops", "args_bytes", "kernel_elements",
           "kernel_args_bytes", "inductor_kind"]

Args = list[tuple[list[int], str]]  # (shape, profiler dtype name) of each tensor argument

# The ranges torch.compile writes around a compiled graph's call
COMPILED_GRAPH_RANGES = ("## Call CompiledFxGraph", "Torch-Compiled Region")

# C++ type names the profiler writes in "Input type" (c10's scalar type names).
PROFILER_DTYPES: dict[str, torch.dtype] = {
    "float": torch.float32, "double": torch.float64, "c10::Half": torch.float16,
    "c10::BFloat16": torch.bfloat16, "long int": torch.int64, "long": torch.int64,
    "int": torch.int32, "short int": torch.int16, "short": torch.int16,
    "signed char": torch.int8, "unsigned char": torch.uint8, "bool": torch.bool,
    "c10::complex<float>": torch.complex64, "c10::complex<double>": torch.complex128,
    "c10::Float8_e4m3fn": torch.float8_e4m3fn, "c10::Float8_e5m2": torch.float8_e5m2,
}


def is_inductor_kernel(name: str) -> bool:
    """A kernel Inductor generated and launched under its own name (Triton)."""
    return name.startswith("triton_")


def args_bytes(args: Args) -> int:
    """Bytes of the tensor arguments, each once."""
    return sum(math.prod(s) * PROFILER_DTYPES[d].itemsize for s, d in args)


def kernel_elements(types: Sequence[str], concrete: Sequence[Any] | None) -> int | None:
    """The elements an Inductor kernel iterates over, from its launch's recorded scalar
    arguments: after its buffers Inductor passes the sizes of its ranges (xnumel, and
    r0_numel for a reduction), so their product is the range. A dynamic-shape kernel's
    symbolic sizes, or another integer scalar, only make it larger. None where no
    positive integer scalar was recorded (or one is 0)."""
    if not concrete:
        return None
    elements, found = 1, False
    for t, c in zip(types, concrete, strict=False):
        if t != "Scalar" or isinstance(c, (bool, float)):
            continue
        try:
            v = int(c)
        except (TypeError, ValueError):  # "", "True", "0.5": not a size
            continue
        if v <= 0:
            return None
        elements, found = elements * v, True
    return elements if found else None


def kernel_args_bytes(args: Args, elements: int | None) -> int:
    """Bytes of an Inductor kernel's tensor arguments (its inputs and outputs), each at
    most `elements` of its dtype (kernel_elements): Inductor's own rule
    (Scheduler's read/write buffer sizes: a buffer's access is bounded by the elements
    the kernel computes). Without the bound a kernel reading a slice of a buffer (q of a
    fused qkv projection) or rows of a table (an embedding) was charged all of it: on the
    H200, compiled GPT-2's embedding kernel read as 170 MB in 12.5 us, 13.6 TB/s against
    a 4.2 TB/s roof. NB: a buffer read and written in place (Inductor's in_out_ptr) is one
    argument, counted once."""
    if elements is None:
        return args_bytes(args)
    return sum(min(math.prod(s), elements) * PROFILER_DTYPES[d].itemsize for s, d in args)


def matmul_flops(name: str, args: Args) -> int | None:
    """2 FLOPs per multiply-add (torch.utils.flop_counter's convention) from the recorded
    operand shapes; None when the shapes do not say."""
    two_d = [s for s, _ in args if len(s) == 2]
    three_d = [s for s, _ in args if len(s) == 3]
    if name in ("aten::mm", "aten::addmm") or (is_inductor_kernel(name) and "mm" in name):
        for a, b in zip(two_d, two_d[1:], strict=False):
            if a[1] == b[0]:
                return 2 * a[0] * a[1] * b[1]
    if name in ("aten::bmm", "aten::baddbmm"):
        for a, b in zip(three_d, three_d[1:], strict=False):
            if a[0] == b[0] and a[2] == b[1]:
                return 2 * a[0] * a[1] * a[2] * b[2]
    if "scaled_dot_product" in name and len(args) >= 3:
        q, k = args[0][0], args[1][0]
        if len(q) == 4 and len(k) == 4:  # [B, H, L, E] x [B, H, S, E]: QK^T and PV
            return 4 * q[0] * q[1] * q[2] * k[2] * q[3]
    return None


def inductor_kind(name: str) -> str:
    """The kind an Inductor kernel's name gives after `triton_`: poi (pointwise), red and
    per (reductions), tem (a template: a GEMM or a convolution), for (foreach)."""
    return name.split("_")[1] if name.count("_") >= 1 else ""


def op_class_by_name(name: str) -> str:
    """The op class of a compiled kernel or extern call, from its name: Inductor names a
    Triton kernel by its kind (inductor_kind), then by the ops it fused, so a pointwise
    kernel fused from an addmm's bias add (`triton_poi_fused_add_addmm_...`) is pointwise."""
    if is_inductor_kernel(name):
        kind = inductor_kind(name)
        if kind == "tem":
            return "matmul"
        return {"poi": "pointwise", "red": "reduction", "per": "reduction",
                "for": "pointwise"}.get(kind, "matmul" if "mm" in name else "other")
    if "convolution" in name:
        return "conv"
    if "scaled_dot_product" in name:
        return "attention"
    if any(k in name for k in ("mm", "addmm", "bmm", "linear")):
        return "matmul"
    return "copy" if "copy" in name or "fill" in name else "other"
