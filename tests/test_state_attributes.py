"""The state promise beyond parameters and buffers (issue 28, group 1): what a module's
author keeps on `self` (an int, a list, a tensor in a dict, a tensor that is not a
buffer, a torch.Generator), the fields of an object with `__slots__`, a numpy array
changed in place, reached through the module itself or through a closure: after
`diagnose` and after `optimize` each is as it was, byte for byte; what the walk cannot
reach is named in a `warning:` line."""

import collections

import numpy as np
import pytest
import torch

import gobrrr
from gobrrr.state import preserved_state, walk
from gobrrr.workload import from_callable


class Counting(torch.nn.Module):
    """The probe's model: its forward changes four kinds of attribute."""

    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(8, 8)
        self.calls = 0
        self.log = []
        self.cache = {"t": torch.zeros(3)}
        self.plain = torch.zeros(2)  # a tensor attribute, not a registered buffer
        self.g = torch.Generator().manual_seed(7)
        self.hist = np.zeros(4)
        self.recent = collections.deque(maxlen=8)

    def forward(self, x):
        self.calls += 1
        self.log.append(1)
        self.cache["t"].add_(1)
        self.plain.add_(1)
        self.hist[0] += 1
        self.recent.append(self.calls)
        noise = torch.rand(1, generator=self.g)
        return self.lin(x) + noise


class Slotted:
    __slots__ = ("count", "items", "t", "acc")

    def __init__(self):
        self.count = 0
        self.items = []
        self.t = torch.zeros(2)
        self.acc = torch.zeros(2)


def _state(m):
    return (m.calls, list(m.log) + ["|"] + list(m.recent), m.cache["t"].clone(),
            m.plain.clone(), m.g.get_state().clone(), m.hist.copy(), id(m.log),
            id(m.cache["t"]), id(m.plain), id(m.recent))


def _same(a, b):
    assert a[0] == b[0] and a[1] == b[1]
    assert torch.equal(a[2], b[2]) and torch.equal(a[3], b[3]) and torch.equal(a[4], b[4])
    assert np.array_equal(a[5], b[5])
    assert a[6:] == b[6:]  # the same objects, restored in place


@pytest.mark.parametrize("through", ["module", "closure"])
def test_module_attributes_are_restored_after_diagnose(through):
    m = Counting()
    x = torch.randn(4, 8)
    before = _state(m)
    fn = m if through == "module" else (lambda a: m(a))
    r = gobrrr.diagnose(fn, x, time_budget_s=0.05, experiments=False)
    assert m.calls == 0 and m.log == []  # the probe saw the list 1,035 long
    _same(before, _state(m))
    assert r.state.warnings == []


def test_module_attributes_are_restored_after_optimize():
    m = Counting()
    x = torch.randn(4, 8)
    before = _state(m)
    # the diagnosis runs the user's model itself (the search runs copies)
    gobrrr.optimize(m, x, budget_s=12, only=["inference_mode"])
    _same(before, _state(m))


def test_slots_fields_are_restored():
    s = Slotted()
    t_id = id(s.t)

    def step(x):
        s.count += 1
        s.items.append(x.sum().item())
        s.t = s.t + 1  # rebound
        s.acc.add_(x.sum())  # changed in place
        return x * 2

    w = from_callable(step, (torch.ones(3),))
    reach = walk(w.fn, w.args, w.kwargs)
    assert s in reach.slotted and s.items in reach.containers
    with preserved_state(w) as check:
        for _ in range(5):
            step(torch.ones(3))
    assert (s.count, s.items, id(s.t)) == (0, [], t_id)
    assert torch.equal(s.t, torch.zeros(2)) and torch.equal(s.acc, torch.zeros(2))
    assert check.warnings == []


def test_state_past_the_depth_limit_is_named():
    from gobrrr.state import MAX_STATE_DEPTH

    deep = {"t": torch.zeros(1)}
    for _ in range(MAX_STATE_DEPTH + 2):
        deep = {"next": deep}

    holder = [deep]
    w = from_callable(lambda: holder[0] and 1)
    with preserved_state(w) as check:
        pass
    assert any(f"deeper than {MAX_STATE_DEPTH} links" in line for line in check.warnings)


def test_library_modules_are_not_walked_past_their_tensors():
    # a torch module's own attributes (hooks, flags) are not user state: nothing of
    # Linear's __dict__ but its parameters and scalars is in the reach
    lin = torch.nn.Linear(2, 2)
    reach = walk(lin, (torch.ones(1, 2),))
    assert reach.modules == [lin] and reach.containers == [] and reach.objects == []
