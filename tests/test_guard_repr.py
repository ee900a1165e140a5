"""The short tensor repr held while the search's candidates compile (guard_repr.py)."""

import pytest
import torch

from gobrrr.remedies import guard_repr
from gobrrr.remedies.guard_repr import repr_guards, short_tensor_repr


def test_the_releases_whose_guards_format_tensors():
    assert repr_guards("2.11.0+cu130")
    assert repr_guards("2.10.1")
    assert not repr_guards("2.13.0+cpu")
    assert not repr_guards("2.1.0")  # not read as 2.10


def test_short_repr_held_only_where_torch_needs_it(monkeypatch):
    t = torch.arange(3.0)
    p = torch.nn.Parameter(torch.zeros(2, 2))
    long_t = repr(t)
    monkeypatch.setattr(torch, "__version__", "2.11.0+cu130")
    with short_tensor_repr():
        assert repr(t) == "tensor(shape=(3,), dtype=torch.float32, device=cpu)"
        assert repr(p).endswith("tensor(shape=(2, 2), dtype=torch.float32, device=cpu)")
    assert repr(t) == long_t
    with pytest.raises(RuntimeError), short_tensor_repr():
        raise RuntimeError("a compile failed")
    assert repr(t) == long_t  # restored when the body raises
    monkeypatch.setattr(torch, "__version__", "2.13.0+cpu")
    with short_tensor_repr():
        assert repr(t) == long_t
    assert guard_repr.REPR_GUARD_TORCH == ("2.10", "2.11")

