"""The work of an op or a kernel known only by its name and the (shape, dtype) arguments
the profiler recorded for it: the profiler's dtype names, and the class, FLOPs and bytes
of Inductor's Triton kernels (a `triton_poi_fused_add_cos_sin_0` event around each
launch, its tensors as its arguments) and of the extern ATen calls inside compiled code.
One source for the live compiled path (compiled.py) and for traces (tracefile/opcount.py),
so a compiled kernel counts the same in both."""

from __future__ import annotations

import math

import torch

__all__ = ["PROFILER_DTYPES", "Args", "COMPILED_GRAPH_RANGES", "is_inductor_kernel",
           "op_class_by_name", "matmul_flops", "args_bytes"]

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
    """Bytes of the tensor arguments, each once: for a Triton kernel its inputs and
    outputs, what Inductor's own byte count sums."""
    return sum(math.prod(s) * PROFILER_DTYPES[d].itemsize for s, d in args)


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


def op_class_by_name(name: str) -> str:
    """The op class of a compiled kernel or extern call, from its name: Inductor names a
    Triton kernel by its kind (poi: pointwise, red/per: reduction, tem: a template GEMM)."""
    if is_inductor_kernel(name):
        kind = name.split("_")[1] if "_" in name else ""
        if "mm" in name or kind == "tem":
            return "matmul"
        return {"poi": "pointwise", "red": "reduction", "per": "reduction"}.get(kind, "other")
    if "convolution" in name:
        return "conv"
    if "scaled_dot_product" in name:
        return "attention"
    if any(k in name for k in ("mm", "addmm", "bmm", "linear")):
        return "matmul"
    return "copy" if "copy" in name or "fill" in name else "other"
