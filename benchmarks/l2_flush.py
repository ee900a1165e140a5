"""Does flushing the GPU's L2 between calls change small-kernel timings? (Decides whether
gobrrr's timer needs an L2 flush; it has none: see gobrrr/timing.py.)

For each kernel: its device time per call with CUDA events, (a) warm: 50 calls back to
back, as gobrrr's timer and a training loop run them; (b) cold: one call at a time after
writing a 512 MiB buffer (well above the H200's 50-60 MB L2), events around the call only.
Medians of 20 repetitions. Usage: python3 benchmarks/l2_flush.py
"""

from __future__ import annotations

import statistics

import torch


def kernel_us(fn, calls: int, flush=None, reps: int = 20) -> float:
    out = []
    for _ in range(reps):
        if flush is not None:
            flush()
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        for _ in range(calls):
            fn()
        b.record()
        torch.cuda.synchronize()
        out.append(a.elapsed_time(b) * 1e3 / calls)
    return statistics.median(out)


def main() -> None:
    buf = torch.empty(2**27, dtype=torch.int32, device="cuda")  # 512 MiB

    def flush() -> None:
        buf.zero_()

    cases = []
    for n in (2**14, 2**18, 2**20, 2**22, 2**26):  # 64 KiB .. 256 MiB fp32
        x = torch.randn(n, device="cuda")
        cases.append((f"x.cos() {n * 4 / 2**20:g} MiB", lambda x=x: x.cos()))
    for n in (256, 1024, 4096):
        a = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
        cases.append((f"bf16 mm {n}^3", lambda a=a: a @ a))
    print(f"{'kernel':24} {'warm us':>9} {'cold us':>9} {'cold/warm':>9}")
    for name, fn in cases:
        for _ in range(10):
            fn()
        warm = kernel_us(fn, 50)
        cold = kernel_us(fn, 1, flush)
        print(f"{name:24} {warm:9.2f} {cold:9.2f} {cold / warm:9.2f}")


if __name__ == "__main__":
    main()
