"""Does flushing the GPU's L2 between calls change small-kernel timings? (Decides whether
gobrrr's timer needs an L2 flush; it has none: see gobrrr/timing.py.)

Kernel time only, launch cost removed: each case is captured in a CUDA graph of 50 calls
and the replay is timed with CUDA events.
- warm: 50 calls back to back (a small kernel's inputs stay in L2, as in a training loop
  where the previous kernel just wrote them, and as gobrrr's timer runs them);
- cold: 50 x (write a 512 MiB buffer, well above the H200's 50-60 MB L2; then the call),
  minus a graph of the 50 buffer writes alone.
Medians of 20 replays. Usage: python3 benchmarks/l2_flush.py
"""

from __future__ import annotations

import statistics

import torch

CALLS = 50


def graph_us(body, reps: int = 20) -> float:
    """Median time of one replay of a graph of `body` (us)."""
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        body()  # warm-up outside capture
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        body()
    out = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        g.replay()
        b.record()
        torch.cuda.synchronize()
        out.append(a.elapsed_time(b) * 1e3)
    return statistics.median(out)


def main() -> None:
    buf = torch.empty(2**27, dtype=torch.int32, device="cuda")  # 512 MiB

    cases = []
    for n in (2**14, 2**18, 2**20, 2**22, 2**26):  # 64 KiB .. 256 MiB fp32
        x = torch.randn(n, device="cuda")
        cases.append((f"x.cos() {n * 4 / 2**20:g} MiB", lambda x=x: x.cos()))
    for n in (256, 1024, 4096):
        a = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
        cases.append((f"bf16 mm {n}^3", lambda a=a: a @ a))

    def flushes() -> None:
        for _ in range(CALLS):
            buf.zero_()

    flush_us = graph_us(flushes)
    print(f"{'kernel':24} {'warm us':>9} {'cold us':>9} {'cold/warm':>9}")
    for name, fn in cases:
        def warm_body(fn=fn) -> None:
            for _ in range(CALLS):
                fn()

        def cold_body(fn=fn) -> None:
            for _ in range(CALLS):
                buf.zero_()
                fn()

        warm = graph_us(warm_body) / CALLS
        cold = (graph_us(cold_body) - flush_us) / CALLS
        print(f"{name:24} {warm:9.2f} {cold:9.2f} {cold / warm:9.2f}")


if __name__ == "__main__":
    main()
