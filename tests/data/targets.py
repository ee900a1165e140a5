"""Targets for the CLI tests: good, broken and awkward workloads."""

import torch


def good(batch_size=4):
    w = torch.randn(16, 16)
    return (lambda x: torch.relu(x @ w)), (torch.randn(batch_size, 16),)


def no_batch():
    x = torch.randn(8, 8)
    return (lambda a: a.cos()), (x,)


def wrong_return():
    return 42


def builds_but_raises(batch_size=2):
    def fn(x):
        return x @ torch.randn(3, 3)  # shape mismatch: (b, 5) @ (3, 3)

    return fn, (torch.randn(batch_size, 5),)


def factory_raises(batch_size=2):
    raise ValueError("the user's factory is broken")


def with_dropout(batch_size=8):
    drop = torch.nn.Dropout(0.5)
    return (lambda x: drop(x).sum()), (torch.randn(batch_size, 32),)


def syncs(batch_size=4):
    w = torch.randn(16, 16)

    def fn(x):
        y = x @ w
        if y.sum().item() > 1e9:  # a CPU sync: no CUDA-graph capture possible
            print("big")
        return y

    return fn, (torch.randn(batch_size, 16),)


NOT_CALLABLE = 3


def fails_above_4(batch_size=4):
    """Refuses batches above 4, as an out-of-memory would: the 2x batch must be caught."""
    if batch_size > 4:
        raise RuntimeError("CUDA out of memory (simulated)")
    w = torch.randn(16, 16)
    return (lambda x: x @ w), (torch.randn(batch_size, 16),)


def raises_on_second_call(batch_size=2):
    """Each instance runs once, then raises: priming a copy passes, the next call fails."""
    calls = []

    def fn(x):
        calls.append(1)
        if len(calls) > 1:
            raise ValueError("the second call of this instance fails")
        return x * 2.0

    return fn, (torch.randn(batch_size, 5),)


def nan_output(batch_size=4):
    """A broken workload: its first row of weights is NaN, so every output is NaN."""
    w = torch.randn(16, 16)
    w[0] = float("nan")
    return (lambda x: x @ w), (torch.randn(batch_size, 16),)
