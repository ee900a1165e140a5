"""The state guarantee: after `diagnose` and after `optimize`, every tensor, the optimizer
and scheduler state, Python counters, RNGs and the precision API are as they were, for
training steps in the shapes users' scripts take (tests/data/scripts.py); what cannot be
rewound is named loudly."""

import hashlib
import random
import sys
from pathlib import Path

import pytest
import torch

import gobrrr
from gobrrr.state import preserved_state, walk
from gobrrr.workload import from_callable

sys.path.insert(0, str(Path(__file__).parent / "data"))
import scripts  # noqa: E402


def _bytes(t):
    return t.detach().cpu().contiguous().view(-1).view(torch.uint8).numpy().tobytes()


def fingerprint(objects):
    """A hash of everything a training step can change, plus the values that must also
    keep their identity (the same tensor objects)."""
    h = hashlib.sha256()
    ids = []
    for name, obj in sorted(objects.items()):
        h.update(name.encode())
        if isinstance(obj, torch.nn.Module):
            for n, t in [*obj.named_parameters(), *obj.named_buffers()]:
                h.update(n.encode() + _bytes(t))
                h.update(b"none" if t.grad is None else _bytes(t.grad))
                ids += [id(t), id(t.grad)]
            h.update(repr([m.training for m in obj.modules()]).encode())
        elif isinstance(obj, torch.optim.Optimizer):
            for st in obj.state.values():
                for k, v in sorted(st.items()):
                    h.update(k.encode() + (_bytes(v) if torch.is_tensor(v) else repr(v).encode()))
                    ids.append(id(v))
            for g in obj.param_groups:
                h.update(repr({k: v for k, v in g.items() if k != "params"}).encode())
            ids.append(id(obj.param_groups))
        elif isinstance(obj, torch.optim.lr_scheduler.LRScheduler):
            h.update(repr(obj.state_dict()).encode())
        elif torch.is_tensor(obj):
            h.update(_bytes(obj))
        elif isinstance(obj, scripts.Trainer):
            h.update(repr((obj.steps, len(obj.losses))).encode())
    h.update(_bytes(torch.get_rng_state()))
    h.update(repr(random.getstate()).encode())
    h.update(repr((scripts.STEP, torch.get_float32_matmul_precision())).encode())
    return h.hexdigest(), ids


@pytest.mark.parametrize("shape", sorted(scripts.SHAPES))
def test_diagnose_leaves_every_shape_as_it_was(shape):
    step, args, objects = scripts.SHAPES[shape]()
    before = fingerprint(objects)
    report = gobrrr.diagnose(step, *args, time_budget_s=0.05)
    assert fingerprint(objects) == before
    state = report.to_dict()["state"]
    assert state["warnings"] == [], state["warnings"]
    assert state["storages"] > 0 and state["found"]["modules"] >= 1


@pytest.mark.parametrize("shape", sorted(scripts.SHAPES))
def test_optimize_leaves_every_shape_as_it_was(shape):
    step, args, objects = scripts.SHAPES[shape]()
    before = fingerprint(objects)
    gobrrr.optimize(step, *args, diagnose=False, budget_s=5,
                    only=["zero_grad_set_to_none", "foreach_optimizer"])
    assert fingerprint(objects) == before


def test_the_walker_finds_state_behind_globals_partials_and_containers():
    found = {}
    for shape, make in scripts.SHAPES.items():
        step, args, objects = make()
        r = walk(step, args)
        found[shape] = r
        assert objects["model"] in r.modules, shape
        assert objects["opt"] in r.optimizers, shape
    assert found["trainer"].name(scripts.TRAINER) == "TRAINER"
    assert scripts.SCHED in found["scheduler"].objects  # an LR scheduler: by attributes
    assert ("STEP" in {n for _g, n in found["scheduler"].globals})  # a plain int counter
    assert found["partial"].name(found["partial"].optimizers[0]) == "partial.args[1]"


def test_precision_medium_survives_diagnose_and_optimize():
    torch.set_float32_matmul_precision("medium")
    try:
        step, args, _ = scripts.make_closure()
        gobrrr.diagnose(step, *args, time_budget_s=0.05, experiments=False)
        assert torch.get_float32_matmul_precision() == "medium"  # readable: not mixed
        gobrrr.optimize(step, *args, diagnose=False, budget_s=5, only=["tf32"])
        assert torch.get_float32_matmul_precision() == "medium"
    finally:
        torch.set_float32_matmul_precision("highest")


def test_an_iterator_the_step_advances_is_named_loudly():
    step, args, objects = scripts.make_iterator()
    with pytest.warns(UserWarning, match=r"batches.*cannot be rewound: gobrrr's calls "
                                         r"advanced it"):
        report = gobrrr.diagnose(step, *args, time_budget_s=0.05, experiments=False)
    assert any("batches" in w for w in report.to_dict()["state"]["warnings"])
    assert any(n.startswith("warning: ") and "batches" in n for n in report.notes)


def test_a_tensor_that_changes_size_is_reported_not_silently_kept():
    buf = torch.zeros(4)

    def step():
        buf.resize_(8)  # a mutation gobrrr cannot undo in place

    with preserved_state(from_callable(step)) as check:
        step()
    assert any("changed size" in w and "args" not in w for w in check.warnings)


def test_restore_is_in_place():
    step, args, objects = scripts.make_trainer()
    opt, sched, trainer = objects["opt"], objects["sched"], objects["trainer"]
    exp_avg = next(iter(opt.state.values()))["exp_avg"]
    groups, losses = opt.param_groups, trainer.losses
    with preserved_state(from_callable(step, args)):
        for _ in range(3):
            step(*args)
        opt.state.clear()  # even a wholesale reset comes back, with the same objects
    assert next(iter(opt.state.values()))["exp_avg"] is exp_avg
    assert opt.param_groups is groups and trainer.losses is losses and len(losses) == 1
    assert sched.last_epoch == 1 and trainer.steps == 1


@pytest.mark.cuda
def test_diagnose_leaves_a_cuda_training_step_as_it_was():
    model = scripts._model().cuda()
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    x, y = (t.cuda() for t in scripts._data())

    def step(x, y):
        return scripts._train(model, opt, x, y)

    step(x, y)
    objects = {"model": model, "opt": opt}
    before = fingerprint(objects), _bytes(torch.cuda.get_rng_state())
    report = gobrrr.diagnose(step, x, y, time_budget_s=0.05)
    assert (fingerprint(objects), _bytes(torch.cuda.get_rng_state())) == before
    assert report.to_dict()["state"]["warnings"] == []
    assert report.to_dict()["state"]["snapshot_on"] == "device"


def test_global_names_are_the_globals_the_code_loads_not_its_attribute_names():
    # `opt.step()` puts "step" in co_names; a module-level `step` (often the workload
    # itself) must not count as state the function reaches: a copy of the workload then
    # still "shared" the user's model and optimizer through it, and every optimizer
    # remedy was skipped as "could not be copied apart".
    from gobrrr.state import global_names

    def f():
        opt.step()  # noqa: F821 - only compiled, never run
        return math.pi  # noqa: F821

    assert global_names(f.__code__) == {"opt", "math"}


def test_a_copied_optimizer_steps_itself_not_the_users():
    # Older torch: an LR scheduler wraps its optimizer's `step` on the instance, calling
    # it through a weak reference; a deep copy kept that wrapper (it would step the
    # user's optimizer). Simulated here as torch did it.
    import weakref

    from gobrrr.state import copy_workload

    p = torch.nn.Parameter(torch.ones(2))
    opt = torch.optim.SGD([p], lr=1.0)
    ref, func = weakref.ref(opt), type(opt).step

    def wrapper(*a, **k):
        return func.__get__(ref(), type(opt))(*a, **k)

    wrapper._wrapped_by_lr_sched = True
    opt.step = wrapper

    def step():
        p.grad = torch.ones(2)
        opt.step()

    copied = copy_workload(step, (), {})
    copied.fn()
    assert torch.equal(p.detach(), torch.ones(2))  # the user's parameter untouched
    assert torch.equal(copied.optimizers[0].param_groups[0]["params"][0].detach(),
                       torch.zeros(2))
