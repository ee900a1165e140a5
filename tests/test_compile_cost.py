"""A compiled call's own host cost (compile_cost.py, the calibration's compiled_call_s and
compiled_tensor_s) and what the CPU compile prediction makes of it (savings.compiled_call):
exact arithmetic on hand-made budgets, one real measurement on this CPU."""

from dataclasses import replace

import pytest

from gobrrr.budget import Budget
from gobrrr.gains import predicted_loss
from gobrrr.hardware import Ceilings
from gobrrr.remedies.base import Context
from gobrrr.remedies.catalog import predicted_slower
from gobrrr.remedies.compiled import predict_default
from gobrrr.remedies.savings import compiled_call


def _records():
    """X = A @ W; Y = relu(X); a view of Y; U = Y' @ W; V = relu(U): two extern GEMMs,
    two pointwise ops that stay apart (a GEMM between them), one view."""
    from gobrrr.counting import OpRecord

    ops = [("aten::mm", "matmul", (1, 2), 10), ("aten::relu", "pointwise", (10,), 11),
           ("aten::t", "view", (11,), 11), ("aten::mm", "matmul", (11, 2), 12),
           ("aten::relu", "pointwise", (12,), 13)]
    return [OpRecord(index=i, op=op, module="Global", phase="forward", op_class=cls,
                     dtype="fp32", flops=0, bytes=0, tensor_core_unit=None,
                     has_formula=True, reads=reads, writes=((out, 4),))
            for i, (op, cls, reads, out) in enumerate(ops)]


def _ctx(call_s, tensor_s, overhead_s=40e-6, params=3):
    ceil = Ceilings(device="cpu", fingerprint={"name": "test"},
                    peak_flops_per_s={"fp32": 1e11}, bandwidth_bytes_per_s=1e10,
                    op_overhead_s=4e-6, python_ops_per_s=1e7, measured_at="t",
                    calibrate_s=0.0, compiled_call_s=call_s, compiled_tensor_s=tensor_s)
    b = Budget(wall_s=overhead_s + 10e-6, busy_s=10e-6, overhead_s=overhead_s,
               memory_s=10e-6, compute_s=0.0, floor_s=0.0, below_roof_s=0.0,
               compute_s_by_unit={})
    return Context("cpu", b, ceil, _records(), param_storages=frozenset(range(params)))


def test_the_compiled_call_costs_its_guards_tensors_and_launches():
    # eager: 5 ops x 4 us = 20 us of dispatch (under the 40 us of overhead) goes. The
    # compiled call: 10 us, 3 parameter tensors beyond the input x 1 us, and 4 launches
    # (two GEMMs, two relus a GEMM keeps apart; the view launches nothing) of which 3
    # beyond the first x 4 us: 10 + 3 + 12 = 25 us. Saved 20 - 25 = -5 us: slower,
    # T 50 -> 55 us
    seconds, basis = compiled_call(_ctx(10e-6, 1e-6))
    assert seconds == {"overhead": pytest.approx(-5e-6)}
    assert basis == ("the dispatch of 5 eager ops goes (20 us); the compiled call costs the "
                     "host 25 us: 10 us a call, 3 parameter and buffer tensor(s) x 1 us, ~4 "
                     "extern calls and fused kernels where eager ran 4 ops x 4 us "
                     "(calibrated): 5 us more host time a call")
    ctx = _ctx(10e-6, 1e-6)
    assert predict_default(ctx).speedup is None  # a loss: not offered
    assert predicted_loss(ctx.budget, predict_default(ctx)) == pytest.approx(50 / 55)
    slower = {spec.name: speedup for spec, speedup, _ in predicted_slower(ctx)}
    assert slower["compile"] == pytest.approx(50 / 55)


def test_a_cheap_compiled_call_still_gains_the_dispatch_it_removes():
    # 2 us a call, no parameters: 2 + 0 + 12 = 14 us against 20 us of dispatch: 6 us
    # saved, T 50 -> 44 us
    ctx = _ctx(2e-6, 1e-6, params=0)
    assert compiled_call(ctx)[0] == {"overhead": pytest.approx(6e-6)}
    assert predict_default(ctx).speedup == pytest.approx(50 / 44)
    assert "compile" not in {spec.name for spec, _, _ in predicted_slower(ctx)}
    assert predicted_loss(ctx.budget, predict_default(ctx)) is None


def test_without_the_calibrated_costs_the_dispatch_alone_is_an_upper_bound():
    ctx = _ctx(None, None)
    seconds, basis = compiled_call(ctx)
    assert seconds == {"overhead": pytest.approx(20e-6)}
    assert basis.startswith("upper bound: 5 ops x 4 us = 20 us of dispatch removed")


def test_a_cache_without_the_costs_still_loads(tmp_path):
    from gobrrr import hardware

    ceil = _ctx(None, None).ceilings
    d = ceil.to_dict()
    for key in ("compiled_call_s", "compiled_tensor_s"):
        d.pop(key)
    back = Ceilings.from_dict(d)
    assert back.compiled_call_s is None and back.compiled_tensor_s is None
    assert hardware._implausible(replace(ceil, compiled_call_s=5.0).to_dict()) == (
        "compiled_call_s is 5, outside what any machine measures (0-0.1)")


def test_a_compiled_call_is_measured_on_this_cpu():
    # one real measurement (Inductor compiles two tiny functions, a few seconds): a
    # compiled call costs the host something, each further tensor less than the call
    from gobrrr.compile_cost import compiled_call_costs

    call_s, tensor_s = compiled_call_costs("cpu", budget_s=0.2)
    assert 0 < call_s < 10e-3
    assert 0 <= tensor_s < call_s


def test_the_doctor_says_why_compile_is_not_listed():
    from types import SimpleNamespace

    from gobrrr.verdict import slower_notes

    ctx = _ctx(10e-6, 1e-6)
    notes = slower_notes(ctx.budget, SimpleNamespace(records=ctx.records), ctx.ceilings,
                         "cpu", None, None, param_storages=ctx.param_storages)
    assert notes[0].startswith("torch.compile is not listed: predicted slower here "
                               "(0.91x): the dispatch of 5 eager ops goes (20 us)")


def test_a_cpu_cache_from_before_gets_the_costs_measured_once(_isolated_cache, monkeypatch):
    from gobrrr import hardware

    fp = hardware.fingerprint("cpu")
    old = replace(_ctx(None, None).ceilings, fingerprint=fp)
    hardware._save_cache(hardware._cache_path(fp), old, [])
    calls = []
    monkeypatch.setattr(hardware, "compiled_call_costs",
                        lambda device, budget_s: calls.append(device) or (3e-5, 1e-6))
    got = hardware.calibrate("cpu")
    assert (got.compiled_call_s, got.compiled_tensor_s) == (3e-5, 1e-6)
    assert got.peak_flops_per_s == {"fp32": 1e11}  # the other roofs kept, not re-measured
    assert hardware.calibrate("cpu").compiled_call_s == 3e-5 and calls == ["cpu"]  # saved
    # where compiling failed, the error is kept and no compile is tried again
    monkeypatch.setattr(hardware, "compiled_call_costs", lambda device, budget_s: 1 / 0)
    hardware._save_cache(hardware._cache_path(fp), old, [])
    failed = hardware.calibrate("cpu")
    assert failed.compiled_call_s is None
    assert failed.details["compiled_call_error"] == "ZeroDivisionError: division by zero"
    monkeypatch.setattr(hardware, "compiled_call_costs", lambda device, budget_s: 1 / 1)
    assert hardware.calibrate("cpu").compiled_call_s is None
