"""Does Inductor's padding of misaligned GEMM dimensions explain why compile beat its
prediction on GPT-2 8x512 in bf16 (issue 24)? In the bf16 doctor report the LM head
(4096 x 768 by 768 x 50257) took 3.36 ms, 94 TFLOP/s, against a roofline floor of
0.46 ms: N = 50257 is not a multiple of 8, so a bf16 row of the output is not 16-byte
aligned. Times (CUDA events behind a held GPU, median of 20) of that GEMM in bf16:
F.linear as the model calls it, the same with N padded to 50264 (a multiple of 8),
torch.compile of the F.linear (Inductor's pad_mm pass decides), and gobrrr's GEMM probe
(gemm_probe._cuda_time, row-major B) at N and at the padded N; fp32 and TF32 too.

    python benchmarks/pad_probe.py        # GPU machine
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from typing import Any


def _time(fn: Callable[[], Any], reps: int = 20) -> float:
    import torch

    from gobrrr.host_issue import cuda_hold

    hold = cuda_hold()
    for _ in range(3):
        fn()
    out = []
    for _ in range(reps):
        start = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        if hold is not None:
            hold(5e-4)
        start.record()
        fn()
        end.record()
        end.synchronize()
        out.append(start.elapsed_time(end) / 1e3)
    return statistics.median(out)


def main() -> None:
    import torch
    import torch.nn.functional as F

    from gobrrr.gemm_probe import GemmShape, _cuda_time
    from gobrrr.settings import tf32

    m, k, n = 4096, 768, 50257
    n_pad = (n + 7) // 8 * 8
    flops = 2 * m * n * k
    for fmt in ("bf16", "fp32", "tf32"):
        dtype = torch.bfloat16 if fmt == "bf16" else torch.float32
        x = torch.randn(m, k, device="cuda", dtype=dtype)
        w = torch.randn(n, k, device="cuda", dtype=dtype)
        wp = torch.zeros(n_pad, k, device="cuda", dtype=dtype)
        wp[:n] = w
        torch._dynamo.reset()
        compiled = torch.compile(lambda a, b: F.linear(a, b))
        with tf32(fmt == "tf32"):
            rows = {
                "F.linear N=50257": _time(lambda: F.linear(x, w)),  # noqa: B023
                f"F.linear N={n_pad}": _time(lambda: F.linear(x, wp)),  # noqa: B023
                "torch.compile(F.linear) N=50257":
                    _time(lambda: compiled(x, w)),  # noqa: B023
            }
            same = (compiled(x, w) - F.linear(x, w)).abs().max().item()
        rows["probe N=50257"] = _cuda_time(GemmShape(1, m, n, k), fmt)
        rows[f"probe N={n_pad}"] = _cuda_time(GemmShape(1, m, n_pad, k), fmt)
        for name, s in rows.items():
            print(f"{fmt} {name:34s} {s * 1e3:7.3f} ms  {flops / s / 1e12:6.0f} TFLOP/s",
                  flush=True)
        print(f"{fmt} compiled vs eager max abs difference {same:.3g}", flush=True)


if __name__ == "__main__":
    main()
