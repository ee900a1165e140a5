"""The inference remedies on tiny models on CPU (verified like the others, global settings
restored), the --budget-s deadline (A/B timing, a candidate abandoned, the whole command),
and one prediction for the doctor report and optimize alike."""

import json
import math
import os
import subprocess
import sys
import time

import pytest
import torch
from torch import nn

import gobrrr
from gobrrr.api import diagnose_workload, optimize_workload
from gobrrr.gains import Gain
from gobrrr.remedies.base import STAGE_MUTATE, Context, RemedySpec
from gobrrr.remedies.evaluate import evaluate, make_reference
from gobrrr.remedies.precision import cast_candidate
from gobrrr.remedies.verify import OutOfTime, ab_time, compare
from gobrrr.state import copy_workload
from gobrrr.targets import load_target
from gobrrr.workload import from_callable


def mlp(scale=1.0):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 8))
    with torch.no_grad():
        for p in model.parameters():
            p.mul_(scale)
    return model, torch.randn(16, 32)


def rows(res):
    return {r.name: r for r in res.remedies}


# ---------------------------------------------------------------- inference_mode


def test_inference_mode_on_an_mlp_matches_eager_exactly():
    model, x = mlp()  # called with autograd on, as an inference script that forgot no_grad
    before = [p.detach().clone() for p in model.parameters()]
    res = optimize_workload(from_callable(model, (x,)), diagnose=False, budget_s=60,
                            only=["inference_mode"], ab_budget_s=0.3)
    r = rows(res)["inference_mode"]
    # the same math without the bookkeeping: equal outputs, whatever the speed
    assert r.verified and r.max_error == 0.0, r
    assert r.status in ("verified", "no significant change", "slower")
    assert "torch.inference_mode()" in r.snippet
    assert torch.is_grad_enabled() and not torch.is_inference_mode_enabled()
    assert all(torch.equal(a, b) for a, b in zip(before, model.parameters(), strict=True))


def test_inference_mode_does_not_apply_to_a_training_step():
    model, x = mlp()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)

    def step(x):
        opt.zero_grad()
        loss = model(x).square().mean()
        loss.backward()
        opt.step()
        return loss.detach()

    res = optimize_workload(from_callable(step, (x,)), diagnose=False, budget_s=30,
                            only=["inference_mode", "bf16_cast"], ab_budget_s=0.2)
    r = rows(res)
    assert r["inference_mode"].status == "not applicable"
    assert r["inference_mode"].reason == ("the workload calls backward (or an optimizer "
                                          "step): it needs autograd")
    assert r["bf16_cast"].status == "not applicable"


# ---------------------------------------------------------------- bf16 cast


def test_bf16_cast_on_an_mlp_passes_verification():
    model, x = mlp()
    res = optimize_workload(from_callable(model, (x,)), diagnose=False, budget_s=60,
                            only=["bf16_cast"], ab_budget_s=0.3)
    r = rows(res)["bf16_cast"]
    assert r.verified and r.status not in ("rejected", "failed"), r
    assert r.tolerance == "relative L2 <= 0.05, cosine >= 0.99"
    assert r.max_error < 0.05 and r.checks["cosine_min"] >= 0.99
    # the copy was cast, never the user's model
    assert all(p.dtype == torch.float32 for p in model.parameters()) and \
        x.dtype == torch.float32


def _cast_spec(name, cast):
    def apply(cand, ctx):
        return cast(cand)

    return RemedySpec(name, "test", "compute", STAGE_MUTATE, "precision",
                      lambda ctx: None, lambda ctx: Gain.none("test"), apply, "# none",
                      precision="bf16")


def _fp16_overflow(cand):
    return cast_candidate(cand, torch.float16)


def _drops_biases(cand):
    cand = cast_candidate(cand, torch.bfloat16)
    for m in cand.modules:
        for sub in m.modules():
            if isinstance(sub, nn.Linear):
                sub.bias.data.zero_()  # a cast that lost the biases on the way
    return cand


def test_a_broken_cast_fails_verification():
    model, x = mlp(scale=1000.0)  # activations beyond fp16's 65504 in the second layer
    with torch.no_grad():
        assert model(x).abs().max() > 65504 and torch.isfinite(model(x)).all()
    res = optimize_workload(
        from_callable(model, (x,)), diagnose=False, budget_s=60, only=["batch"],
        ab_budget_s=0.2, extra_specs=[_cast_spec("fp16_overflow", _fp16_overflow),
                                      _cast_spec("drops_biases", _drops_biases),
                                      _cast_spec("bf16_cast_ok", lambda c: cast_candidate(
                                          c, torch.bfloat16))])
    r = rows(res)
    assert r["fp16_overflow"].status == "rejected"
    assert r["fp16_overflow"].reason.startswith("NaN or inf in the output")
    assert r["drops_biases"].status == "rejected"
    assert "over the tolerance 0.05" in r["drops_biases"].reason
    assert r["bf16_cast_ok"].verified  # the same model cast right passes
    assert res.best is None or res.best.name == "bf16_cast_ok"


def test_cosine_below_its_limit_fails_even_within_relative_l2():
    ref = [torch.tensor([1.0, 0.0])]
    turned = [torch.tensor([0.8, 0.6])]  # relative L2 0.632, cosine 0.8
    assert compare(ref, turned, "relative_l2", 1.0).ok
    got = compare(ref, turned, "relative_l2", 1.0, min_cosine=0.99)
    assert not got.ok and got.reason == "cosine similarity 0.8 under 0.99"
    assert got.tolerance == "relative L2 <= 1, cosine >= 0.99"


# ---------------------------------------------------------------- settings restored


def test_the_new_switches_restore_what_they_set():
    import torch._inductor.config as inductor
    from torch._dynamo.utils import counters

    from gobrrr.settings import cudnn_benchmark, inductor_options, tf32

    before_bench, before_freezing = torch.backends.cudnn.benchmark, inductor.freezing
    with cudnn_benchmark(), inductor_options(freezing=True):
        assert torch.backends.cudnn.benchmark and inductor.freezing
    assert torch.backends.cudnn.benchmark == before_bench
    assert inductor.freezing == before_freezing
    with pytest.raises(AttributeError, match="no option 'no_such_option'"):
        with inductor_options(no_such_option=1):
            pass
    # a switch held around compiled calls leaves dynamo's counters to the caller (they
    # were reset to their value at entry, which voided every compiled combination)
    counters.clear()
    with tf32():
        counters["stats"]["unique_graphs"] += 1
    assert counters["stats"]["unique_graphs"] == 1
    counters.clear()


# ---------------------------------------------------------------- the deadline


def _stub(step_s):
    now = [0.0]

    def f():
        now[0] += step_s

    return f, (lambda: now[0])


def test_ab_timing_is_abandoned_at_the_deadline_before_its_rounds():
    f, clock = _stub(1e-3)
    # 2 estimate calls (2 ms), then blocks of 10 calls (10 ms each, 20 ms a round):
    # the deadline at 50 ms comes after 2 full rounds, before the 8 needed
    with pytest.raises(OutOfTime, match="deadline came after 2 of the 8 A/B rounds"):
        ab_time(f, f, device="cpu", budget_s=10.0, block_s=0.01, deadline=0.05,
                clock=clock)
    f, clock = _stub(1e-3)
    # after the 8 rounds (2 + 160 ms) the deadline ends the timing like a spent budget
    got = ab_time(f, f, device="cpu", budget_s=10.0, block_s=0.01, deadline=0.2,
                  clock=clock)
    # rounds start while the clock is before 0.2: the 9th at 0.162, the 10th at 0.182
    assert got.rounds == 10


def test_a_candidate_past_the_deadline_is_abandoned_with_a_reason():
    model, x = mlp()
    base = copy_workload(model, (x,), {})
    ref = make_reference(base, "cpu")
    spec = _cast_spec("bf16", lambda c: cast_candidate(c, torch.bfloat16))
    got, cand = evaluate([spec], base, ref, Context("cpu"), 0.2,
                         deadline=time.perf_counter())
    assert got.status == "skipped" and cand is None
    assert got.reason.startswith("abandoned: the --budget-s deadline came while preparing "
                                 "(warm call 1 of 3, ")
    assert ref.call_s > 0 and math.isfinite(ref.call_s)


# ---------------------------------------------------------------- one prediction


@pytest.mark.serial
def test_doctor_and_optimize_predict_the_same_numbers_from_one_budget():
    w = load_target("examples:mlp", "cpu")
    report = diagnose_workload(w, time_budget_s=0.1)
    doctor = {r.spec: r.predicted_speedup for r in report.remedies}
    assert doctor and all(doctor.values())
    # budget_s=1: no candidate fits (each needs its 1.5 s of A/B timing), yet every row
    # carries the prediction the search ordered it by
    res = optimize_workload(w, report=report, budget_s=1.0)
    optimize = {r.name: r.predicted_speedup for r in res.remedies}
    assert {n: optimize[n] for n in doctor} == doctor
    # the batch advice is there only when the batch experiment found 2x the batch worth
    # it, which on a loaded machine it may not (a measurement, not this test's point)
    advice = {"batch_size": "advice"} if "batch_size" in doctor else {}
    assert {r.name: r.status for r in res.remedies if r.name in doctor} == dict.fromkeys(
        doctor, "skipped") | advice


# ---------------------------------------------------------------- the whole run


@pytest.mark.serial
@pytest.mark.slow
def test_the_whole_command_ends_within_its_budget(tmp_path):
    # 20 s: a first calibration of this CPU (13-15 s with the element-wise math probes,
    # more on a busy machine) is part of the run; at 10 s the command took 22.4 s of the
    # 21.5 s allowed once, with other jobs on the 2 cores
    budget_s = 20.0
    env = dict(os.environ, XDG_CACHE_HOME=str(tmp_path / "cache"))  # calibration included
    t0 = time.perf_counter()
    r = subprocess.run([sys.executable, "-m", "gobrrr", "optimize", "examples:mlp",
                        "--device", "cpu", "--budget-s", str(budget_s), "--json", "-q"],
                       capture_output=True, text=True, env=env, timeout=120)
    elapsed_s = time.perf_counter() - t0
    assert r.returncode == 0, r.stderr
    # measured here: ~13-22 s (2 s of imports, 13-15 s of a first calibration, the rest
    # the diagnosis and whatever fits of the search)
    assert elapsed_s < 1.15 * budget_s + 10, elapsed_s
    d = json.loads(r.stdout)
    # The rule, 1.15 x S + 10 s, for the run too: a first calibration of this CPU
    # (~13 s with the bandwidth probes, cached afterwards) alone can exceed the budget.
    assert d["budget_s"] == budget_s and d["optimize_s"] < 1.15 * budget_s + 10
    statuses = {x["status"] for x in d["remedies"]}
    assert statuses <= {"verified", "no significant change", "slower", "skipped",
                        "not applicable", "advice", "unverifiable"}


def _scheduled_step():
    """A training step with an LR scheduler whose LR changes every step (lr / (1 + s))."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(32, 32), nn.ReLU(), nn.Linear(32, 32))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2, foreach=False)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 1.0 / (1 + s))

    def step(x, y):
        opt.zero_grad(set_to_none=False)
        loss = nn.functional.mse_loss(model(x), y)
        loss.backward()
        opt.step()
        sched.step()
        return loss.detach()

    return step, sched


def test_a_step_with_an_lr_scheduler_is_verified_at_the_same_point_of_its_schedule():
    # The candidate's warm calls advance its copy's scheduler; its outputs must be
    # compared at the reference's point of the schedule (seen: every exact optimizer
    # remedy rejected, error 0.0159 against 1e-4), and the user's scheduler is untouched.
    step, sched = _scheduled_step()
    x, y = torch.randn(16, 32), torch.randn(16, 32)
    before = (sched.last_epoch, sched.optimizer.param_groups[0]["lr"])
    # 60 s: the budget is not under test (at 20 s, on a loaded CI runner, the diagnosis
    # left less than the remedy's ~1.5 s and it was skipped)
    res = gobrrr.optimize(step, x, y, budget_s=60, only=["zero_grad_set_to_none"])
    row = next(r for r in res.remedies if r.name == "zero_grad_set_to_none")
    assert row.status not in ("not applicable", "rejected", "failed"), row.reason
    assert row.verified and row.max_error == 0.0
    assert (sched.last_epoch, sched.optimizer.param_groups[0]["lr"]) == before


def test_freezing_folds_only_what_computes_from_parameters_even_when_storages_are_reused():
    """Storages are runtime addresses the allocator reuses: a folded weight copy's freed
    storage written again by an activation op is no longer a constant."""
    from gobrrr.counting import OpRecord
    from gobrrr.remedies.savings import folding_ops

    def op(i, reads, writes):
        return OpRecord(i, f"aten::op{i}", "m", "forward", "pointwise", "fp32", 1, 1, None,
                        True, reads=reads, writes=((writes, 4),))

    weight, x = 100, 200
    ops = [op(0, (weight,), 300),  # a weight cast: folds
           op(1, (x, 300), 400),  # reads the input: does not fold
           op(2, (400,), 300),  # 300 freed and reused for an activation
           op(3, (300, weight), 500),  # reads the activation: must not fold
           op(4, (weight,), 600),  # folds again
           op(5, (600,), 700)]  # computes from a folded op alone: folds
    assert [r.index for r in folding_ops(ops, [weight])] == [0, 4, 5]
