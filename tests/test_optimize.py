"""gobrrr optimize: remedies applied to copies, verified, timed A/B, ranked.

CPU timings are noisy on a busy 2-core machine, so speed is asserted only where the
effect is unmistakable (a 7-op pointwise chain over 16 MB fused into one pass: ~4-7x
measured here, asserted > 1.5x) and the timing logic is tested with a stub clock.
"""

import json
import random
from pathlib import Path

import pytest
import torch
from click.testing import CliRunner

from gobrrr.api import optimize_workload
from gobrrr.cli import cli
from gobrrr.gains import Gain
from gobrrr.remedies import catalog
from gobrrr.remedies.attention import find_attention
from gobrrr.remedies.base import STAGE_EXECUTION, RemedySpec
from gobrrr.remedies.verify import (
    DynamoSnapshot,
    ab_time,
    compare,
    compile_problems,
    tolerance_for,
    tolerance_given_noise,
)
from gobrrr.state import copy_workload, stateful_ids
from gobrrr.workload import from_callable

TARGETS = Path(__file__).parent / "data" / "targets.py"


def _checksum(*tensors):
    return [t.detach().double().sum().item() for t in tensors]


# ---------------------------------------------------------------- end to end (CPU)


def test_pointwise_chain_gets_verified_faster_compiled_version():
    torch.manual_seed(0)
    x = torch.randn(2**22)  # 16 MB: each eager op is one full pass over memory
    before = _checksum(x)

    def chain(x):
        return ((x * 1.5 + 0.5) * 0.9 + 0.1).relu() * 2.0 - 1.0

    res = optimize_workload(from_callable(chain, (x,)), diagnose=False, budget_s=60,
                            only=["compile"], ab_budget_s=1.0)
    r = {row.name: row for row in res.remedies}["compile"]
    assert r.status == "verified", r.reason
    assert r.verified and r.max_error <= 1e-4
    # 7 passes over 16 MB -> 1: measured 4-7x here; 1.5x leaves room for a noisy CPU
    assert r.measured_speedup > 1.5 and r.interval[0] > 1.0
    assert r.compile_s > 0 and r.checks["graph_breaks"] == 0
    assert res.best is r and "torch.compile" in res.snippet
    assert torch.allclose(res(x), chain(x), rtol=1e-5, atol=1e-6)
    assert _checksum(x) == before
    d = res.to_dict()
    assert {"name", "predicted_speedup", "measured_speedup", "verified"} <= set(d["best"])
    assert {"name", "status", "reason", "predicted_speedup", "measured_speedup",
            "verified"} <= set(d["remedies"][0])
    assert d["diagnosed_eager_s"] is None  # diagnose=False: no prediction to rest on
    json.dumps(d)


def _spec(name, transform):
    def apply(cand, ctx):
        inner = cand.fn
        cand.fn = lambda *a, **k: transform(inner(*a, **k))
        return cand

    return RemedySpec(name, "test", "memory", STAGE_EXECUTION, "execution",
                      lambda ctx: None, lambda ctx: Gain(2.0, "made up"), apply, "# none")


def test_wrong_remedies_are_rejected_not_timed():
    torch.manual_seed(0)
    x = torch.randn(4096)
    specs = [_spec("off_by_1pct", lambda y: y * 1.01),  # 1e-2 > fp32 rtol 1e-4
             _spec("nan", lambda y: y + float("nan")),
             _spec("int_cast", lambda y: y.round()),
             _spec("faithful", lambda y: y)]
    res = optimize_workload(from_callable(torch.sin, (x,)), diagnose=False, budget_s=30,
                            only=["batch"], extra_specs=specs, ab_budget_s=0.2)
    r = {row.name: row for row in res.remedies}
    for bad in ("off_by_1pct", "nan", "int_cast"):
        assert r[bad].status == "rejected" and not r[bad].verified, r[bad]
        assert r[bad].measured_speedup is None
    assert "tolerance" in r["off_by_1pct"].reason
    assert "NaN" in r["nan"].reason
    assert r["faithful"].verified and r["faithful"].max_error == 0.0
    # The identity is timed (it passed verification); whether it wins is a timing outcome
    # on a 16 KB sin, which a loaded CI machine has flipped (2.14x, interval 1.14-40.64,
    # 2026-12-04): only the rejected ones are asserted never to be chosen.
    assert r["faithful"].measured_speedup is not None
    best = res.to_dict()["best"]["name"]
    assert best in ("eager", "faithful") and (res.best is None) == (best == "eager")
    assert r["batch_size"].status == "not applicable"


def test_training_step_optimizer_remedies_leave_user_objects_untouched():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(32, 32), torch.nn.GELU(),
                                torch.nn.Linear(32, 8))
    opt = torch.optim.Adam(model.parameters(), lr=1e-2, foreach=False)
    x, y = torch.randn(16, 32), torch.randn(16, 8)

    def step(x, y):
        opt.zero_grad(set_to_none=False)
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        opt.step()
        return loss.detach()

    step(x, y)  # the user's optimizer has state and grads before gobrrr sees it
    params = list(model.parameters())
    before = _checksum(*params, *[p.grad for p in params], x, y)
    state_before = [_checksum(*[v for v in opt.state[p].values()]) for p in params]
    res = optimize_workload(from_callable(step, (x, y)), diagnose=False, budget_s=60,
                            only=["optim"], ab_budget_s=0.3)
    r = {row.name: row for row in res.remedies}
    assert r["fused_optimizer"].verified, r["fused_optimizer"].reason
    assert r["zero_grad_set_to_none"].verified, r["zero_grad_set_to_none"].reason
    assert r["foreach_optimizer"].verified, r["foreach_optimizer"].reason
    assert _checksum(*params, *[p.grad for p in params], x, y) == before
    assert [_checksum(*[v for v in opt.state[p].values()]) for p in params] == state_before
    assert opt.param_groups[0]["fused"] in (None, False)
    assert opt.param_groups[0]["foreach"] is False
    assert "zero_grad" not in vars(opt)  # no shadowing method left on the user's object


_CALLS = 0


def _recompiling(x):
    global _CALLS
    _CALLS += 1
    return x * 2.0 + (_CALLS - _CALLS)  # dynamo guards on the int: a new graph per call


def _noisy(eps):
    """x + eps * N(0, 1) noise drawn from Python's global RNG: optimize re-seeds torch's
    RNG before every compared run (dropout must match), so torch.randn noise would repeat
    exactly; this noise does not, and two eager runs differ by ~eps * sqrt(2) (rel. L2)."""
    random.seed(0)  # the draws, hence every number below, are the same on every run

    def fn(x):
        return x + eps * torch.tensor([random.gauss(0.0, 1.0) for _ in range(x.numel())])

    return from_callable(fn, (torch.ones(256),))


def test_eager_noise_above_the_ceiling_is_unverifiable_never_verified():
    res = optimize_workload(_noisy(0.05), diagnose=False, budget_s=30, only=["batch"],
                            extra_specs=[_spec("faithful", lambda y: y)], ab_budget_s=0.2)
    r = {row.name: row for row in res.remedies}["faithful"]
    # eager vs eager ~0.07 relative L2: covering it needs ~0.14, above fp32's 1e-2 ceiling.
    # Before the ceiling the tolerance grew to 2x eager's noise and this was "verified".
    assert r.status == "unverifiable" and not r.verified, r
    assert r.reason.startswith("eager differs from itself by 0.07")
    assert "above the 0.01 ceiling for float32 outputs" in r.reason
    assert r.measured_speedup is not None and "outputs not verified" in r.reason
    assert res.best is None


def test_eager_noise_under_the_ceiling_grows_the_tolerance():
    res = optimize_workload(_noisy(1e-3), diagnose=False, budget_s=30, only=["batch"],
                            extra_specs=[_spec("faithful", lambda y: y)], ab_budget_s=0.2)
    r = {row.name: row for row in res.remedies}["faithful"]
    # eager vs eager ~1.4e-3 relative L2 (~2e-3 elementwise, over fp32's 1e-4): judged
    # by relative L2 at twice that, under the 1e-2 ceiling; the faithful copy passes
    assert r.verified and r.status != "unverifiable", r
    assert r.tolerance.startswith("relative L2 <= 0.00")
    assert "judged by relative L2" in r.reason and "ceiling 0.01" in r.reason


def test_a_reference_that_is_not_finite_verifies_nothing():
    x = torch.tensor([0.0, 1.0, -1.0, 2.0])
    said = []
    res = optimize_workload(from_callable(lambda a: a / 0.0, (x,)), diagnose=False,
                            budget_s=30, only=["batch"], ab_budget_s=0.2, progress=said.append,
                            extra_specs=[_spec("faithful", lambda y: y)])
    r = {row.name: row for row in res.remedies}["faithful"]
    # before: "rejected" for "NaN or inf in the output" and a note "non-deterministic: inf"
    where = "call 1 output: 1 NaN, 3 inf of 4 (float32 [4])"  # the first call named
    assert r.status == "unverifiable" and not r.verified
    assert r.reason.startswith(f"the reference output is not finite ({where}): nothing to "
                               "verify against; measured ")
    assert res.notes == [f"warning: the reference output is not finite: {where}; no "
                         "remedy can be verified against it"]
    assert res.reference["eager_nondeterminism"] == {}
    assert f"warning: the reference output is not finite: {where}" in said


def test_a_reference_of_zeros_verifies_nothing():
    # torchvision's untrained ViT (its head starts at zero): a bf16 cast "verified"
    # 9.19x on the H200 by comparing zeros with zeros
    w = torch.nn.Linear(4, 3)
    torch.nn.init.zeros_(w.weight)
    torch.nn.init.zeros_(w.bias)
    x = torch.randn(2, 4)
    res = optimize_workload(from_callable(lambda a: w(a), (x,)), diagnose=False,
                            budget_s=30, only=["batch"], ab_budget_s=0.2,
                            extra_specs=[_spec("wrong", lambda y: y + 1.0)])
    r = {row.name: row for row in res.remedies}["wrong"]
    assert r.status == "unverifiable" and not r.verified
    assert r.reason.startswith("the reference output is all zeros (a layer initialized to "
                               "zero, untrained?): a remedy's outputs compared with zeros "
                               "prove nothing")
    assert res.best is None
    assert res.notes == ["warning: the reference output is all zeros (a layer initialized "
                         "to zero, untrained?): a remedy's outputs compared with zeros "
                         "prove nothing; no remedy can be verified against it"]


def test_cli_optimize_warns_of_a_nan_reference_even_when_quiet():
    r = CliRunner().invoke(cli, ["optimize", f"{TARGETS}:nan_output", "--device", "cpu",
                                 "--no-diagnose", "--only", "batch", "-q", "--json"])
    assert r.exit_code == 0, r.output
    warned = [x for x in r.stderr.splitlines() if x.startswith("gobrrr: warning:")]
    assert len(warned) == 1 and "the reference output is not finite" in warned[0]
    notes = json.loads(r.stdout)["notes"]
    assert any("the reference output is not finite" in n for n in notes)
    assert not any("non-deterministic" in n for n in notes)


def test_diagnose_warnings_stay_in_the_optimize_notes():
    from types import SimpleNamespace

    from gobrrr.remedies.result import _diagnose_warnings

    report = SimpleNamespace(notes=["wall time is noisy (IQR 9% of median)",
                                    "warning: batch scaling at 2x failed: TypeError: x"])
    assert _diagnose_warnings(report) == ["warning: batch scaling at 2x failed: TypeError: x"]
    assert _diagnose_warnings(None) == []


def test_tolerance_given_noise_exact():
    quiet = {"elementwise": 5e-5, "relative_l2": 1e-5}
    assert tolerance_given_noise("float32", None, quiet) == \
        tolerance_given_noise("float32", None, {}) == tolerance_given_noise(
            "float32", None, {"elementwise": 1e-4, "relative_l2": 1.0})  # within: as is
    t = tolerance_given_noise("float32", None, {"elementwise": 1e-3, "relative_l2": 2e-3})
    assert (t.measure, t.rtol, t.unverifiable) == ("relative_l2", 4e-3, "")
    # 2 x 6e-3 = 1.2e-2 > the fp32 ceiling 1e-2
    t = tolerance_given_noise("float32", None, {"elementwise": 0.05, "relative_l2": 6e-3})
    assert t.unverifiable == ("eager differs from itself by 0.006 (relative L2): a "
                              "tolerance of 0.012 would be needed, above the 0.01 ceiling "
                              "for float32 outputs")
    # bf16 autocast on fp32 outputs: relative L2 5e-2 already; the ceiling is that
    assert tolerance_given_noise("float32", "bf16", {"relative_l2": 0.04}).rtol == 5e-2
    assert tolerance_given_noise("float32", "bf16", {"relative_l2": 0.06}).unverifiable
    # fp64: ceiling 1e-4 (fp32's tolerance); fp16: 5e-2 (bf16's); bf16: its own 5e-2
    assert tolerance_given_noise("float64", None,
                                 {"elementwise": 1e-6, "relative_l2": 4e-5}).rtol == 8e-5
    assert tolerance_given_noise("float64", None,
                                 {"elementwise": 1e-6, "relative_l2": 6e-5}).unverifiable
    assert tolerance_given_noise("float16", None, {"relative_l2": 0.02}).rtol == 0.04
    assert tolerance_given_noise("float16", None, {"relative_l2": 0.03}).unverifiable
    assert tolerance_given_noise("bfloat16", None, {"relative_l2": 0.05}).rtol == 0.05
    assert "0.05 ceiling for bfloat16" in tolerance_given_noise(
        "bfloat16", None, {"relative_l2": 0.051}).unverifiable


def test_recompile_limit_trap_is_caught_not_timed():
    x = torch.randn(64)
    res = optimize_workload(from_callable(_recompiling, (x,)), diagnose=False,
                            budget_s=30, only=["compile"], ab_budget_s=0.3,
                            compile_backend="eager")  # dynamo only: no C++ compile
    r = {row.name: row for row in res.remedies}["compile"]
    assert r.status == "failed", r
    assert "recompile" in r.reason and r.measured_speedup is None


# ---------------------------------------------------------------- pieces


def test_compare_tolerances_and_nan():
    r = [torch.tensor([1.0, 2.0, 3.0])]
    assert compare(r, [r[0] * (1 + 5e-5)], *tolerance_for("float32", None)).ok
    assert not compare(r, [r[0] * (1 + 5e-4)], *tolerance_for("float32", None)).ok
    # bf16 rounding of every element (u = 2^-8) passes bf16's relative L2, not fp32's
    c = [r[0].bfloat16().float() * (1 + 2**-9)]
    assert compare(r, c, *tolerance_for("float32", "bf16")).ok
    assert not compare(r, c, *tolerance_for("float32", None)).ok
    nan = compare(r, [torch.tensor([1.0, float("nan"), 3.0])], "relative_l2", 1.0)
    assert not nan.ok and "NaN" in nan.reason
    assert not compare([torch.tensor([1, 2])], [torch.tensor([1, 3])], "elementwise", 1).ok
    assert not compare(r, [torch.ones(4)], "elementwise", 1.0).ok  # shape


def test_ab_time_with_stub_clock():
    now = [0.0]

    def cost(s):
        def f():
            now[0] += s
        return f

    fast = ab_time(cost(2e-3), cost(1e-3), device="cpu", budget_s=0.0, min_rounds=9,
                   clock=lambda: now[0])
    # 2 ms vs 1 ms per call, exactly: speedup 2 and a zero-width interval
    assert fast.speedup == pytest.approx(2.0) and fast.interval == pytest.approx((2, 2))
    assert fast.change == "faster" and fast.rounds == 9
    same = ab_time(cost(1e-3), cost(1e-3), device="cpu", budget_s=0.0, clock=lambda: now[0])
    assert same.change == "same"
    slow = ab_time(cost(1e-3), cost(1.5e-3), device="cpu", budget_s=0.0,
                   clock=lambda: now[0])
    assert slow.change == "slower" and slow.speedup == pytest.approx(1 / 1.5)


def test_compile_problems_from_counters():
    ok = DynamoSnapshot(1, 1, 1, 7, False, 0)
    assert compile_problems(ok, ok) == ([], [])
    later = DynamoSnapshot(3, 3, 3, 21, False, 0)
    assert "recompiled 2 times" in compile_problems(ok, later)[0][0]
    trap = DynamoSnapshot(9, 8, 8, 8, True, 0)
    assert "recompile limit" in compile_problems(ok, trap)[0][0]
    nothing = DynamoSnapshot(1, 0, 0, 0, False, 0)
    assert any("no graph" in p for p in compile_problems(nothing, nothing)[0])


def test_copies_are_independent():
    model = torch.nn.Linear(4, 4)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    x = torch.randn(2, 4)

    def step(x):
        opt.zero_grad()
        model(x).sum().backward()
        opt.step()

    c = copy_workload(step, (x,), {})
    assert not stateful_ids(step, (x,), {}) & stateful_ids(c.fn, c.args, c.kwargs)
    assert len(c.modules) == 1 and len(c.optimizers) == 1
    # the copied optimizer updates the copied parameters, not the user's
    assert c.optimizers[0].param_groups[0]["params"][0] is c.modules[0].weight
    w0 = model.weight.detach().clone()
    c.fn(*c.args)
    assert torch.equal(model.weight, w0) and not torch.equal(c.modules[0].weight, w0)


def test_hand_written_attention_is_detected():
    from gobrrr.counting import count

    q, k, v = (torch.randn(2, 4, 64, 16) for _ in range(3))

    def by_hand(q, k, v):
        return (q @ k.transpose(-2, -1) / 4.0).softmax(-1) @ v

    m = find_attention(count(by_hand, q, k, v).records)
    assert len(m) == 1
    assert m[0].score_bytes == 2 * 4 * 64 * 64 * 4  # [B, H, T, T] fp32
    sdpa = torch.nn.functional.scaled_dot_product_attention
    assert find_attention(count(sdpa, q, k, v).records) == []


def test_sdpas_own_backward_is_not_hand_written_attention():
    # CPU, SDPA with dropout in training: its math path's backward is bmm, mul, softmax
    # backward, bmm, which read as two hand-written chains (torch 2.13: a 4-layer GPT-2
    # using HF's "sdpa" attention was offered SDPA); a written attention's stays
    from gobrrr.counting import count

    torch.manual_seed(0)
    q, k, v = (torch.randn(2, 4, 64, 16, requires_grad=True) for _ in range(3))

    def by_hand(q, k, v):
        ((q @ k.transpose(-2, -1) / 4.0).softmax(-1) @ v).square().mean().backward()

    def sdpa(q, k, v):
        torch.nn.functional.scaled_dot_product_attention(
            q, k, v, dropout_p=0.1).square().mean().backward()

    # the forward's chain at least (how many of the backward's chains link up depends on
    # the allocator's reuse of storages: 2 in one process here, 4 in a pytest worker)
    assert find_attention(count(by_hand, q, k, v).records)
    assert find_attention(count(sdpa, q, k, v).records) == []


def test_sdpas_math_path_is_not_hand_written_attention():
    # SDPA's math path (here forced; on CUDA where no fused kernel takes the inputs) runs
    # bmm, _safe_softmax, bmm: a softmax (counting.py), but not one the user wrote
    from torch.nn.attention import SDPBackend, sdpa_kernel

    from gobrrr.counting import count

    q, k, v = (torch.randn(2, 4, 64, 16) for _ in range(3))

    def math_path(q, k, v):
        with sdpa_kernel(SDPBackend.MATH):
            return torch.nn.functional.scaled_dot_product_attention(q, k, v)

    records = count(math_path, q, k, v).records
    assert "aten::_safe_softmax" in {r.op for r in records}
    assert find_attention(records) == []


def test_catalog_selection():
    assert {s.name for s in catalog.select(["precision"])} == {"tf32", "bf16_autocast",
                                                               "bf16_cast"}
    assert [s.name for s in catalog.select(["tf32,cuda_graphs"])] == ["tf32", "cuda_graphs"]
    with pytest.raises(Exception, match="unknown remedy"):
        catalog.select(["nope"])
    # every remedy has one unique name, so --only can name each of them
    assert len({s.name for s in catalog.ALL}) == len(catalog.ALL)


# ---------------------------------------------------------------- the budget's start


def _clocked_run(monkeypatch, now_s, **kw):
    """optimize_workload with its clock stopped at `now_s` and the diagnosis and search
    faked: (the result, what the search and the diagnosis were given, progress lines)."""
    from types import SimpleNamespace

    from gobrrr import api
    from gobrrr.remedies.result import OptimizeResult

    seen, said = {}, []
    monkeypatch.setattr(api, "time", SimpleNamespace(perf_counter=lambda: now_s))

    def diagnose(w, *, experiments, progress, time_budget_s):
        seen["diagnosis"] = (time_budget_s, experiments)
        return None

    def search(w, *, deadline, **_k):
        seen["deadline"] = deadline
        return OptimizeResult({"name": "w"}, "cpu", [], None, "# keep", lambda: None,
                              notes=["search note"])

    monkeypatch.setattr(api, "diagnose_workload", diagnose)
    monkeypatch.setattr(api, "search_workload", search)
    res = optimize_workload(from_callable(torch.sin, (torch.ones(4),)), only=["tf32"],
                            progress=said.append, **kw)
    return res, seen, said


def test_the_budget_counts_from_the_commands_start(monkeypatch):
    # issue 24: BERT-base at --budget-s 60 on the H200 spent 18-21 s on imports and its
    # build before optimize_workload, whose deadline counted from its own call: 83 s
    # in all. Called at t = 100 s, the command started at 80 s:
    res, seen, said = _clocked_run(monkeypatch, 100.0, budget_s=60.0, started_s=80.0)
    assert seen["deadline"] == 140.0  # 80 + 60, not 100 + 60
    # the diagnosis gets a quarter of the 40 s left: 10 s over 14 measurements
    assert seen["diagnosis"] == (10.0 / 14, True)
    assert res.setup_s == 20.0 and res.budget_s == 60.0 and res.optimize_s == 0.0
    assert said[0] == ("importing and building the workload took 20.0 s of --budget-s 60: "
                       "the diagnosis and the search share the 40.0 s left")
    assert said[1].startswith("diagnosing first (~25% of the 40 s left of --budget-s 60)")
    assert res.notes == ["search note"] and res.to_dict()["setup_s"] == 20.0
    # from Python (no started_s): from the call, as before; 15 s / 14 over doctor's 1 s
    res, seen, said = _clocked_run(monkeypatch, 100.0, budget_s=60.0)
    assert seen["deadline"] == 160.0 and seen["diagnosis"] == (1.0, True)
    assert res.setup_s == 0.0 and said[0].startswith(
        "diagnosing first (~25% of --budget-s 60 s)")


def test_a_budget_spent_before_the_run_diagnoses_minimally_and_says_so(monkeypatch):
    # 75 s of setup for --budget-s 60: no negative budget; the least diagnosis
    # (TIME_BUDGET_RANGE_S's 0.05 s per measurement, no experiments), a deadline already
    # past (the search starts nothing), and a warning first in the notes
    res, seen, said = _clocked_run(monkeypatch, 100.0, budget_s=60.0, started_s=25.0)
    assert seen["deadline"] == 85.0 and seen["diagnosis"] == (0.05, False)
    assert res.setup_s == 75.0
    warning = ("warning: importing and building the workload took 75.0 s, all of "
               "--budget-s 60: the budget was spent before the search began, with no "
               "time left to measure a remedy")
    assert res.notes == [warning, "search note"]
    assert said[0] == warning.removeprefix("warning: ")
    assert said[1].startswith("diagnosing first (~25% of the 0 s left of --budget-s 60)")


def test_a_search_with_no_time_left_skips_everything_and_ends(monkeypatch):
    # the real search, its deadline 10 s past when it begins: every candidate skipped
    import time

    res = optimize_workload(from_callable(torch.sin, (torch.randn(64),)), diagnose=False,
                            budget_s=10, only=["compile", "tf32"], ab_budget_s=0.3,
                            started_s=time.perf_counter() - 20.0)
    rows = {r.name: r.status for r in res.remedies}
    assert rows["compile"] == "skipped" and rows["tf32"] == "not applicable"
    assert set(rows.values()) == {"skipped", "not applicable"}  # nothing ran
    assert res.best is None and res.setup_s >= 20.0
    assert res.notes[0].startswith("warning: importing and building the workload took")
    assert res.conclusion.startswith("nothing could be measured within --budget-s 10")


# ---------------------------------------------------------------- command line


def test_cli_json_and_errors(monkeypatch):
    r = CliRunner().invoke(cli, ["optimize", "examples:mlp", "--device", "cpu",
                                 "--no-diagnose", "--only", "tf32,batch", "--json",
                                 "-q"])
    assert r.exit_code == 0, r.output
    d = json.loads(r.stdout)
    assert d["best"]["name"] == "eager" and d["best"]["verified"] is True
    assert {x["name"] for x in d["remedies"]} == {"tf32", "batch_size"}
    bad = CliRunner().invoke(cli, ["optimize", "--device", "cpu", "--only", "warp"])
    assert bad.exit_code == 2
    assert len([x for x in bad.output.splitlines() if x.strip()]) == 1


def test_cli_budget_counts_from_the_commands_start(monkeypatch):
    # the CLI's own start, before torch's import and the target's build, is the start of
    # --budget-s: the search's deadline is at most the build's start + the budget (a
    # deadline from optimize_workload's call would be at least 0.2 s later)
    import time

    from gobrrr import api
    from gobrrr.cli import optimize as cli_optimize

    seen = {}
    load, search = cli_optimize.load_announced, api.search_workload

    def slow_load(*a, **k):
        seen["load"] = time.perf_counter()
        time.sleep(0.2)
        return load(*a, **k)

    def spy(w, *, deadline, **k):
        seen["deadline"] = deadline
        return search(w, deadline=deadline, **k)

    monkeypatch.setattr(cli_optimize, "load_announced", slow_load)
    monkeypatch.setattr(api, "search_workload", spy)
    before = time.perf_counter()
    r = CliRunner().invoke(cli, ["optimize", "examples:mlp", "--device", "cpu",
                                 "--no-diagnose", "--only", "tf32", "--budget-s", "30",
                                 "--json"])
    assert r.exit_code == 0, r.output
    assert before + 30 <= seen["deadline"] <= seen["load"] + 30
    d = json.loads(r.stdout)
    assert d["budget_s"] == 30 and d["setup_s"] >= 0.2
    assert (f"importing and building the workload took {d['setup_s']:.1f} s of "
            "--budget-s 30: the diagnosis and the search share the") in " ".join(
        r.stderr.split())  # one line, however rich wraps it


def test_table_fits_80_columns(monkeypatch):
    monkeypatch.setenv("TERMINAL_WIDTH", "80")
    monkeypatch.setenv("NO_COLOR", "1")
    r = CliRunner().invoke(cli, ["optimize", "examples:mlp", "--device", "cpu",
                                 "--no-diagnose", "--only", "compile_max_autotune,optim",
                                 "-q"])
    assert r.exit_code == 0, r.output
    assert "compile_max_autotune" in r.stdout and "not applicable" in r.stdout
    assert max(len(line) for line in r.stdout.splitlines()) <= 80


@pytest.mark.parametrize("name", ["builds_but_raises", "raises_on_second_call"])
def test_no_diagnose_workload_that_raises_shows_only_the_users_traceback(name, gobrrr_frames):
    # builds_but_raises fails while priming the copy; raises_on_second_call passes the
    # priming and fails in the next call of the copy (counting it, diagnose skipped)
    r = CliRunner().invoke(cli, ["optimize", f"{TARGETS}:{name}", "--device", "cpu",
                                 "--no-diagnose", "-q"])
    assert r.exit_code == 2, r.output
    before_error = r.stderr.split("gobrrr: error")[0]
    assert r.stderr.count("Traceback") == 1, r.stderr  # the user's, and no second one
    assert "targets.py" in before_error
    assert not gobrrr_frames(before_error)
    errors = [x for x in r.stderr.splitlines() if x.startswith("gobrrr: error")]
    assert len(errors) == 1 and "the workload raised" in errors[0]


@pytest.mark.parametrize("only", [",", " , ", ""])
def test_only_with_no_names_is_a_one_line_usage_error(only):
    r = CliRunner().invoke(cli, ["optimize", "--device", "cpu", "--only", only, "-q"])
    assert r.exit_code == 2
    lines = [x for x in r.output.splitlines() if x.strip()]
    assert len(lines) == 1 and "names no remedy" in lines[0], r.output
    # click's own usage errors keep click's form
    missing = CliRunner().invoke(cli, ["optimize", "--device", "cpu", "--only"])
    assert missing.exit_code == 2 and "requires an argument" in missing.output


def test_terminal_table_shows_unverifiable_after_usable_results(monkeypatch, capsys):
    from gobrrr.remedies.base import RemedyResult
    from gobrrr.remedies.result import OptimizeResult
    from gobrrr.show.terminal import print_optimize

    monkeypatch.setenv("TERMINAL_WIDTH", "80")
    monkeypatch.setenv("NO_COLOR", "1")
    rows = [RemedyResult("compile", "memory", "unverifiable", "eager differs from itself "
                         "by 0.07 (relative L2): ...", 2.0, measured_speedup=1.5),
            RemedyResult("tf32", "compute", "rejected", "error 1 over the tolerance"),
            RemedyResult("channels_last", "memory", "no significant change", "1.00x")]
    print_optimize(OptimizeResult({"name": "w", "device": "cpu", "batch_size": 1}, "cpu",
                                  rows, None, "# keep", lambda: None))
    out = capsys.readouterr().out
    assert out.index("channels_last") < out.index("unverifiable") < out.index("rejected")
    assert "1 unverifiable: outputs that could not be judged against eager's" in out
    assert max(len(line) for line in out.splitlines()) <= 80


def test_graph_breaks_come_from_the_compile_itself(monkeypatch):
    # torch._dynamo.explain ran once per search outside any deadline (~50 s on a loaded
    # 2-core CPU for a step logging loss.item(); a probe's runs never finished): the
    # breaks and their reasons are now dynamo's own counts while the variant compiles
    import torch._dynamo

    def no_explain(*a, **k):
        raise AssertionError("torch._dynamo.explain was called")

    monkeypatch.setattr(torch._dynamo, "explain", no_explain)
    log = []

    def step(x):
        y = (x * 2).sin()
        log.append(y.sum().item())  # a graph break
        return y.cos()

    res = optimize_workload(from_callable(step, (torch.randn(64),)), diagnose=False,
                            budget_s=60, only=["compile"], ab_budget_s=0.3,
                            compile_backend="eager")
    r = {row.name: row for row in res.remedies}["compile"]
    assert r.compile_s is not None and r.checks["graph_breaks"] >= 1, r.checks
    assert any("item()" in reason for reason in r.checks["break_reasons"])


@pytest.mark.parametrize("value", ["nan", "inf"])
def test_a_budget_that_never_ends_is_refused(value):
    r = CliRunner().invoke(cli, ["optimize", "examples:mlp", "--budget-s", value])
    assert r.exit_code == 2 and "is not a finite number" in r.output
