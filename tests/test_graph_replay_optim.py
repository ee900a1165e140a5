"""The graph-replay experiment on a training step: the optimizers are made capturable for
the capture (as the CUDA-graph remedy makes them) and given back as they were."""

from __future__ import annotations

import pytest
import torch

from gobrrr.experiments import capturable_while, graph_replay
from gobrrr.timing import measure
from gobrrr.workload import Workload


def _adam_step(device: str) -> tuple[Workload, torch.optim.Optimizer]:
    torch.manual_seed(0)
    model = torch.nn.Linear(8, 8).to(device)
    opt = torch.optim.AdamW([{"params": [model.weight], "weight_decay": 0.1},
                             {"params": [model.bias], "weight_decay": 0.0}], lr=1e-3)
    x = torch.randn(4, 8, device=device)

    def step() -> None:
        opt.zero_grad(set_to_none=False)
        model(x).square().mean().backward()
        opt.step()

    return Workload("adam_step", step, (), device=device), opt


def test_flags_are_set_inside_and_given_back_after():
    w, opt = _adam_step("cpu")
    w()  # the state exists: a step count on the CPU
    before = opt.state[opt.param_groups[0]["params"][0]]["step"]
    with capturable_while([opt]) as changed:
        assert changed == 2
        assert [g["capturable"] for g in opt.param_groups] == [True, True]
    assert [g["capturable"] for g in opt.param_groups] == [False, False]
    assert opt.state[opt.param_groups[0]["params"][0]]["step"] is before


def test_flags_come_back_when_the_block_raises():
    _, opt = _adam_step("cpu")
    with pytest.raises(RuntimeError), capturable_while([opt]):
        raise RuntimeError("capture failed")
    assert [g["capturable"] for g in opt.param_groups] == [False, False]


@pytest.mark.cuda
def test_an_adamw_step_is_captured_and_replayed_then_steps_as_before():
    w, opt = _adam_step("cuda")
    w()  # the counts on the CPU, as a non-capturable AdamW keeps them
    p0 = opt.param_groups[0]["params"][0]
    count = opt.state[p0]["step"]
    eager = measure(w, device="cuda", budget_s=0.5)
    g = graph_replay(w, eager, lambda f: measure(f, device="cuda", budget_s=0.5), [opt])
    assert g.possible, g.reason
    assert g.replay_s is not None and g.replay_s > 0
    assert [x["capturable"] for x in opt.param_groups] == [False, False]
    # the same count object, on the CPU, holding every step taken in the experiment
    assert opt.state[p0]["step"] is count and count.device.type == "cpu"
    assert count.item() > 1
    w()  # a non-capturable step runs after the experiment


def test_a_paired_timing_gives_the_replay_its_ratio_against_eager_timed_beside_it(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """With `paired`, eager's earlier Timing is not used: the speedup is the paired
    median ratio, the eager time the one measured beside the replay (a stretch of
    contention during eager's own timing or the replay's cannot read as a gain or a
    loss). The capture itself is stood in for: this checks the arithmetic on CPU."""
    import gobrrr.experiments as exps

    class FakeGraph:
        def replay(self) -> None:
            return None

    graph = FakeGraph()
    monkeypatch.setattr(exps, "capture_cuda_graph", lambda w: (graph, None))
    monkeypatch.setattr(exps, "_free_device_memory", lambda device: None)
    w = Workload("step", lambda: None, (), device="cuda")
    seen: list[tuple[object, object]] = []

    def paired(a: object, b: object) -> tuple[float, float]:
        seen.append((a, b))
        return 0.050, 2.5

    def timer(f: object) -> object:
        raise AssertionError("the unpaired timer must not run when paired is given")

    eager = measure(lambda: None, device="cpu", budget_s=0.01)
    g = graph_replay(w, eager, timer, (), paired=paired)  # type: ignore[arg-type]
    assert g.possible and g.reason is None
    assert g.eager_s == 0.050
    assert g.replay_s == pytest.approx(0.020)
    assert seen == [(w, graph.replay)]


@pytest.mark.cuda
def test_an_adamw_step_replay_is_timed_interleaved_with_its_eager_step():
    from gobrrr.remedies.verify import ab_time

    w, opt = _adam_step("cuda")
    w()
    eager = measure(w, device="cuda", budget_s=0.5)
    g = graph_replay(w, eager, lambda f: measure(f, device="cuda", budget_s=0.5), [opt],
                     paired=lambda a, b: (lambda r: (r.eager_s, r.speedup))(
                         ab_time(a, b, device="cuda", budget_s=0.5)))
    assert g.possible, g.reason
    assert g.eager_s is not None and g.replay_s is not None and g.replay_s > 0
    # a step of one small Linear is all launches: its replay is faster, by any margin
    assert g.replay_s < g.eager_s
    assert [x["capturable"] for x in opt.param_groups] == [False, False]
    w()


def test_torchs_uncaptured_step_warning_is_marked_given_inside_and_back_after():
    """torch warns once per optimizer that a capturable one steps outside a capture;
    gobrrr's warm-up and eager timing do so on purpose. The flag is torch's warn-once
    attribute; the user's value (or its absence) comes back after the block."""
    _, opt = _adam_step("cpu")
    opt._warned_capturable_if_run_uncaptured = False  # as torch 2.11 constructs it
    with capturable_while([opt]):
        assert opt._warned_capturable_if_run_uncaptured is True
    assert opt._warned_capturable_if_run_uncaptured is False
    del opt._warned_capturable_if_run_uncaptured
    with capturable_while([opt]):
        assert opt._warned_capturable_if_run_uncaptured is True
    assert "_warned_capturable_if_run_uncaptured" not in opt.__dict__


@pytest.mark.cuda
def test_a_capturable_step_outside_a_capture_does_not_warn():
    import warnings

    from gobrrr.experiments import make_capturable

    w, opt = _adam_step("cuda")
    w()
    opt._warned_capturable_if_run_uncaptured = False  # as torch 2.11 constructs it
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        assert make_capturable([opt]) == 2
        w()  # capturable, stepped uncaptured: a warm-up step
    assert not [x for x in seen if "graph capture" in str(x.message)], \
        [str(x.message) for x in seen]
    # the control: the same step warns where the flag is torch's own
    opt._warned_capturable_if_run_uncaptured = False
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        w()
    assert [x for x in seen if "graph capture" in str(x.message)]
