"""What calling a torch.compile'd function costs the host, besides the kernels it runs:
the calibration's `compiled_call_s` and `compiled_tensor_s` (hardware.py).

A compiled call checks TorchDynamo's guards, enters the AOTAutograd and Inductor wrappers,
and hands each tensor the graph reads (its inputs, and the module's parameters and
buffers, which Dynamo lifts to inputs) through them, before and around its kernels. On a
call whose ops each cost microseconds of dispatch this is the whole story: on this
project's 2-core CPU (torch 2.13) the 4-layer MLP of `examples:mlp` at batch 1 takes 60 us
eager and 83 us compiled (0.71x), where removing its 12 ops' dispatch had predicted 3.09x.

Measured with Inductor on two tiny functions whose ops fuse into one kernel:
`one(x) = x + 1` (one input) and `many(x, *ts) = x + ts[0] + ... + ts[63]` (65 inputs).
`compiled_call_s` is the compiled `one`'s call: the fixed cost with one input and one
kernel. `compiled_tensor_s` is (many - one) / 64: the cost of each further tensor. Seen
here: ~30-39 us and ~0.75 us; a compiled Linear layer's parameters cost ~1.2 us each
(measured with 2-64 parameters), so the per-tensor figure is on the low side for
parameters. A compiled training step's wrappers (autograd's) cost more again: not
measured here. On an H100 torch.compile(mode="reduce-overhead") issued GPT-2 at batch 1
in 203 us more than a plain CUDA-graph replay (148 tensors) and ResNet-50 at batch 1 in
283 us more (320 tensors): about 1-1.4 us per tensor
(benchmarks/results/h100/session-2026-12-05ae/).
"""

from __future__ import annotations

from typing import Any

from gobrrr.timing import measure

__all__ = ["compiled_call_costs", "PROBE_TENSORS"]

PROBE_TENSORS = 64  # the further inputs of the `many` probe


def _one(x: Any) -> Any:
    return x + 1


def _many(x: Any, *ts: Any) -> Any:
    y = x
    for t in ts:
        y = y + t
    return y


def compiled_call_costs(device: str, budget_s: float) -> tuple[float, float]:
    """(compiled_call_s, compiled_tensor_s) on `device` (module docstring). Raises what
    torch.compile raises where it cannot compile (no C++ compiler for a CPU kernel, a
    Python Dynamo does not support): the caller keeps the calibration without them."""
    import torch

    gen = torch.Generator(device=device).manual_seed(3)
    x = torch.randn(1, device=device, generator=gen)
    ts = [torch.randn(1, device=device, generator=gen) for _ in range(PROBE_TENSORS)]
    one = torch.compile(_one)
    many = torch.compile(_many)
    one(x)  # compiles; the timings below are of the compiled calls alone
    many(x, *ts)
    one_s = measure(lambda: one(x), device=device, budget_s=budget_s).median_s
    many_s = measure(lambda: many(x, *ts), device=device, budget_s=budget_s).median_s
    return one_s, max(0.0, (many_s - one_s) / PROBE_TENSORS)
