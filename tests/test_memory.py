"""`gobrrr memory` (gobrrr/memory.py): one step's memory by category and per module, with
exact numbers on a Linear stack trained with Adam (hand arithmetic below), the user's
state restored, and the command's JSON and bad input."""

import json

import pytest
import torch
from click.testing import CliRunner
from torch import nn

from gobrrr.cli import cli
from gobrrr.memory import measure_memory
from gobrrr.workload import from_callable

F32 = 4


def _adam_step(foreach):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(256, 512), nn.ReLU(), nn.Linear(512, 256))
    opt = torch.optim.Adam(model.parameters(), foreach=foreach)
    x = torch.randn(64, 256)

    def step(x):
        opt.zero_grad()
        model(x).sum().backward()
        opt.step()

    return step, x, model, opt


@pytest.mark.parametrize("foreach", [False, True])
def test_a_linear_stack_with_adam_is_counted_exactly(foreach):
    step, x, model, opt = _adam_step(foreach)
    before = [p.detach().clone() for p in model.parameters()]
    m = measure_memory(from_callable(step, (x,)))
    params = (256 * 512 + 512 + 512 * 256 + 256) * F32  # 1,051,648 B
    assert m.by_category["parameters"] == params
    # the peak is in the optimizer's step: every gradient alive, no activation left
    assert m.by_category["gradients"] == params
    # Adam keeps exp_avg and exp_avg_sq per parameter, and a 4-byte step per parameter
    assert m.by_category["optimizer_state"] == 2 * params + 4 * F32
    assert m.by_category["activations"] == 0
    assert m.peak_bytes == sum(m.by_category.values())
    assert m.by_category["temporaries"] == m.peak_bytes - 4 * params - 16 - \
        m.by_category["buffers"] - m.by_category["other"]
    # after the root's forward: ReLU's output [64, 512] (its backward reads it) and the
    # output [64, 256], each fp32
    root = next(r for r in m.modules if r["type"] == "Sequential")
    assert root["activations_bytes"] == (64 * 512 + 64 * 256) * F32
    first = next(r for r in m.modules if r["module"] == "0")
    assert first["activations_bytes"] == 64 * 512 * F32  # its own output
    # nothing of the user's changed: parameters and the optimizer's state as they were
    assert all(torch.equal(a, b) for a, b in zip(before, model.parameters(), strict=True))
    assert len(opt.state) == 0


def test_gobrrr_memory_json_and_bad_input():
    r = CliRunner().invoke(cli, ["memory", "examples:mlp_train", "--json", "-q"])
    assert r.exit_code == 0, r.output
    d = json.loads(r.stdout)
    assert d["schema"] == "gobrrr.memory" and d["device"] == "cpu"
    for key in ("peak_bytes", "parameters_bytes", "gradients_bytes",
                "optimizer_state_bytes", "activations_bytes", "temporaries_bytes"):
        assert isinstance(d[key], int) and d[key] >= 0, key
    assert d["parameters_bytes"] == d["gradients_bytes"] > 0
    assert d["optimizer_state_bytes"] == 2 * d["parameters_bytes"] + 8 * 4  # 8 steps
    r = CliRunner().invoke(cli, ["memory", "examples:no_such", "-q"])
    assert r.exit_code == 2 and "Traceback" not in r.output
