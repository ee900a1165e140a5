"""Targets for benchmarks/gate_pairs.py (issue 25, item 5): one CPU workload, and the
same code changed to make one more pass over its data (GATE_EXTRA_PASS=1 in the
environment), the regression a CI gate must catch. One target name for both, as a CI
job compares the same target before and after a change.

A memory-bound chain over a 2^20-element fp32 tensor (4 MiB), every pass written into
a buffer made once (out=): x * 2, - 0.5, + 1, relu (clamp_min), sum; with the extra pass
(another * 2, in place) one more read and write of 4 MiB, about +20% (until session g of
2026-12-02 the extra pass was a * 2 into the other buffer and a copy back: two passes,
+41%). Buffers, not new tensors: a first version allocated a 4 MiB tensor per op, and
its processes fell into two modes, 0.8 ms or 40 ms a call (the allocator reused its
pages or faulted fresh ones every call; gate_pairs.json of 2026-12-02), a noise of its
own that hid the gate's.
"""

import os

import torch

N = 1 << 20


def chain(batch_size=1):
    extra = os.environ.get("GATE_EXTRA_PASS") == "1"
    x = torch.randn(batch_size, N)
    a, b = torch.empty_like(x), torch.empty_like(x)

    def fn(x):
        torch.mul(x, 2.0, out=a)
        if extra:  # one more pass: one read and one write of 4 MiB, in place
            a.mul_(2.0)
        torch.sub(a, 0.5, out=b)
        torch.add(b, 1.0, out=a)
        torch.clamp_min(a, 0.0, out=b)  # relu, written into the buffer
        return b.sum()

    return fn, (x,)
