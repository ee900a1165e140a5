"""Targets for benchmarks/gate_pairs.py (issue 25, item 5): one CPU workload, and the
same code changed to make one more pass over its data (GATE_EXTRA_PASS=1 in the
environment), the regression a CI gate must catch. One target name for both, as a CI
job compares the same target before and after a change.

A memory-bound chain over a 2^20-element fp32 tensor (4 MiB): x * 2, - 0.5, + 1, relu,
sum: 36 MiB moved; with the extra pass (another * 2), 44 MiB: 22% more bytes, one more op
call, and about as much more time.
"""

import os

import torch

N = 1 << 20


def chain(batch_size=1):
    extra = os.environ.get("GATE_EXTRA_PASS") == "1"

    def fn(x):
        y = x * 2.0
        if extra:
            y = y * 2.0
        y = y - 0.5
        y = y + 1.0
        return torch.relu(y).sum()

    return fn, (torch.randn(batch_size, N),)
