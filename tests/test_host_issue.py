"""The host's issue time (host_issue.py) and the floor it puts under predictions
(gains.py): exact arithmetic with a fake clock and hand-made budgets."""

import math
from dataclasses import replace

import pytest
import torch

from gobrrr.budget import Budget
from gobrrr.counting import count
from gobrrr.experiments import GraphReplay
from gobrrr.gains import OVERLAP_P, Gain, combine, gain_from_saved
from gobrrr.host_issue import BLOCKED_SHARE, SAMPLES, measure_host_issue
from gobrrr.verdict import remedies_for


class FakeGPU:
    """A host clock and a GPU held busy by `hold`: a call queues `device_s` of kernels
    behind what the GPU has (as if issued at once) and takes `issue_s` of host time;
    `waits`: it waits for the GPU at its end (a .item() of its result), `waits_first`:
    at its start (a check of an input on the host)."""

    def __init__(self, issue_s: float, waits: bool = False, device_s: float = 0.0,
                 waits_first: bool = False) -> None:
        self.now = 0.0
        self.busy_until = 0.0
        self.issue_s, self.waits, self.device_s = issue_s, waits, device_s
        self.waits_first = waits_first
        self.calls = 0

    def clock(self) -> float:
        return self.now

    def hold(self, seconds: float) -> None:
        self.busy_until = self.now + seconds

    def sync(self) -> None:
        self.now = max(self.now, self.busy_until)

    def call(self) -> None:
        self.calls += 1
        if self.waits_first:
            self.sync()
        self.busy_until = max(self.busy_until, self.now) + self.device_s
        self.now += self.issue_s
        if self.waits:
            self.sync()


def test_issue_time_is_the_host_time_with_the_gpu_held():
    gpu = FakeGPU(issue_s=3e-3)
    got = measure_host_issue(gpu.call, wall_s=10e-3, time_budget_s=1.0, hold=gpu.hold,
                             sync=gpu.sync, clock=gpu.clock)
    assert got.issue_s == pytest.approx(3e-3)
    assert got.hold_s == pytest.approx(20e-3)  # 2 x T_wall
    assert got.note is None and gpu.calls == SAMPLES


def test_a_call_that_waits_for_the_gpu_gets_no_issue_time():
    # a .item() at its end: waits out the hold, and with the GPU running returns only
    # with its 10 ms of kernels done
    gpu = FakeGPU(issue_s=3e-3, waits=True, device_s=10e-3)
    got = measure_host_issue(gpu.call, wall_s=10e-3, time_budget_s=1.0, hold=gpu.hold,
                             sync=gpu.sync, clock=gpu.clock)
    assert got.issue_s is None
    assert got.samples_s[0] == pytest.approx(30e-3)  # the 20 ms hold, then its kernels
    assert got.samples_s[0] > BLOCKED_SHARE * got.hold_s
    assert got.note.startswith("the call waited for the GPU while it was held busy (30 ms "
                               "of a 20 ms hold)")
    assert "returned only with its kernels done (10 ms of its 10 ms)" in got.note


def test_a_call_that_waits_at_its_start_is_timed_with_the_gpu_running():
    # GPT-2 on the H200: transformers checks the attention mask on the host first, so
    # under the hold the call waits it out; with the GPU running it returns in 3 ms of
    # its 10 ms, before its kernels are done: 3 ms is its issue time
    gpu = FakeGPU(issue_s=3e-3, device_s=10e-3, waits_first=True)
    got = measure_host_issue(gpu.call, wall_s=10e-3, time_budget_s=1.0, hold=gpu.hold,
                             sync=gpu.sync, clock=gpu.clock)
    assert got.issue_s == pytest.approx(3e-3)
    assert got.samples_s == pytest.approx((3e-3,) * SAMPLES)
    assert got.note.startswith("the call waited for the GPU while it was held busy (23 ms "
                               "of a 20 ms hold)")
    assert "it returned in 3 ms of its 10 ms, before its kernels were done" in got.note
    assert gpu.calls == 2 * SAMPLES


def test_a_long_call_is_issued_once():
    # each sample: 2 s held + 1 s call = 3 s, over the 1 s budget: one sample, not none
    gpu = FakeGPU(issue_s=0.4)
    got = measure_host_issue(gpu.call, wall_s=1.0, time_budget_s=1.0, hold=gpu.hold,
                             sync=gpu.sync, clock=gpu.clock)
    assert gpu.calls == 1 and got.issue_s == pytest.approx(0.4)


def budget(overhead_s, memory_s, compute_s, host_issue_s=None, by_unit=None):
    busy = memory_s + compute_s
    return Budget(wall_s=overhead_s + busy, busy_s=busy, overhead_s=overhead_s,
                  memory_s=memory_s, compute_s=compute_s, floor_s=0.0, below_roof_s=0.0,
                  compute_s_by_unit=by_unit or {}, host_issue_s=host_issue_s)


def floor_ms(device_ms, host_ms, t_ms=100.0, d_ms=90.0, h_ms=44.0):
    """gains.time_floor_s by hand (p = 2): the GPU's and the host's time left overlapped
    as the root of their squares, scaled so that the call as measured (T, its D and H)
    is not predicted slower than it ran."""
    scale = min(1.0, t_ms / math.hypot(d_ms, h_ms))
    return max(host_ms, scale * math.hypot(device_ms, host_ms))


def test_kernel_savings_stop_at_the_issue_time():
    # T 100 ms: 10 idle, 90 of kernels; the host issues a call in 44 ms. Removing 80 ms of
    # compute: T - saved = 20 ms, but the call cannot end before it is issued, and the
    # 10 ms of kernels left overlap the 44 ms of issuing only in part: hypot(10, 44) x
    # 100 / hypot(90, 44) = 45.04 ms
    assert OVERLAP_P == 2.0
    b = budget(10e-3, 0.0, 90e-3, host_issue_s=44e-3)
    g = gain_from_saved(b, {"compute": 80e-3}, "compute at the bf16 peak")
    after = floor_ms(10, 44)
    assert after == pytest.approx(45.04, abs=0.01)
    assert g.speedup == pytest.approx(100 / after)
    assert g.basis == ("compute at the bf16 peak; the host issues a call in 44 ms "
                       "(measured): 44 ms of it stays, and with the GPU's time left it "
                       "overlaps only in part (fit on H200 rows), so a call takes at least "
                       "45 ms (2.22x)")
    # without a measured issue time: T - saved, as before
    g = gain_from_saved(replace(b, host_issue_s=None), {"compute": 80e-3}, "x")
    assert g.speedup == pytest.approx(100 / 20) and g.basis == "x"
    # 30 ms saved leaves 70 ms, and 60 ms of kernels beside 44 ms of issuing: 74.27 ms
    assert floor_ms(60, 44) == pytest.approx(74.27, abs=0.01)
    assert gain_from_saved(b, {"compute": 30e-3}, "x").speedup == pytest.approx(
        100 / floor_ms(60, 44))
    # 10 ms saved: 80 ms of kernels beside 44 ms of issuing overlap into 91.1 ms, more
    # than T - saved (90 ms): the floor holds even this close to the call as it ran
    assert gain_from_saved(b, {"compute": 10e-3}, "x").speedup == pytest.approx(
        100 / max(90.0, floor_ms(80, 44)))


def test_host_work_removed_lowers_the_floor():
    # an overhead saving is host work removed (dispatch, autograd): 10 ms off the 44 ms
    # issue time; with 80 ms of compute: 10 ms of kernels beside 34 ms of issuing
    b = budget(10e-3, 0.0, 90e-3, host_issue_s=44e-3)
    g = gain_from_saved(b, {"compute": 80e-3, "overhead": 10e-3}, "x")
    assert g.speedup == pytest.approx(100 / floor_ms(10, 34))


def test_a_replay_leaves_what_it_says_and_combines():
    # a replay removes the 10 ms idle and all the issuing (host_left 0): with bf16's 80 ms
    # of compute the kernels are all that is left: 100 / 10 = 10x; bf16 alone keeps the
    # issuing beside its 10 ms of kernels
    b = budget(10e-3, 0.0, 90e-3, host_issue_s=44e-3)
    bf16 = gain_from_saved(b, {"compute": 80e-3}, "bf16")
    graphs = gain_from_saved(b, {"overhead": 10e-3}, "graphs", host_left_s=0.0)
    assert graphs.speedup == pytest.approx(100 / 90)
    both = combine(b, [bf16, graphs], ["bf16", "graphs"])
    assert both.speedup == pytest.approx(10.0) and both.host_left_s == 0.0
    # without the replay the combination keeps the floor (less the overhead saved: none)
    alone = combine(b, [bf16, Gain(None, "none")], ["bf16", "none"])
    assert alone.speedup == pytest.approx(100 / floor_ms(10, 44))


def test_a_replay_with_no_idle_time_still_lifts_the_floor():
    # a device-bound call (no GPU-idle time) gives a replay nothing to save alone, but it
    # still leaves no issue time: beside bf16 (80 ms of kernels gone) the kernels left
    # are the call. On the H200 BERT-base's bf16 cast + CUDA graphs was predicted 2.57x
    # (the cast's alone) and measured 4.03x; CUDA graphs alone 0.99x
    from gobrrr.remedies import savings

    b = budget(0.0, 0.0, 100e-3, host_issue_s=44e-3)

    class Ctx:  # what gain_of reads of a Context
        diagnosed = True
        budget = b

    def replay(_ctx):
        return {}, "no GPU-idle time in the budget for a replay to remove"

    graphs = savings.gain_of(Ctx(), replay, host_left_s=0.0)
    assert graphs.speedup is None and graphs.host_left_s == 0.0
    assert graphs.basis == "no GPU-idle time in the budget for a replay to remove"
    bf16 = gain_from_saved(b, {"compute": 80e-3}, "bf16")
    assert bf16.speedup == pytest.approx(100 / floor_ms(20, 44, 100, 100, 44))
    both = combine(b, [bf16, graphs], ["bf16", "graphs"])
    assert both.speedup == pytest.approx(100 / 20) and both.host_left_s == 0.0


def test_a_host_bound_call_keeps_maxs_answer():
    # GPT-2 at batch 1 on the H200: issued in 8.17 of 8.23 ms, 1 ms of kernels; halving
    # them changes nothing (hypot(1, 8.17) = 8.23 as it ran; hypot(0.5, 8.17) = 8.19)
    b = budget(7.23e-3, 0.0, 1e-3, host_issue_s=8.17e-3)
    g = gain_from_saved(b, {"compute": 0.5e-3}, "x")
    assert g.speedup == pytest.approx(8.23 / floor_ms(0.5, 8.17, 8.23, 1.0, 8.17))
    assert 0.99 < g.speedup < 1.01


def test_remedies_on_cuda_take_the_floor_and_graphs_lift_it(round_cuda_ceilings):
    # one fp32 matmul of 90 us of compute, 10 us idle, issued in 50 us: TF32 (7x the fp32
    # peak) would leave 100 - 90 x 6/7 = 22.9 us, floored by 12.9 us of kernels beside
    # 50 us of issuing; a measured replay (100 -> 90 us) removes the issuing and the idle
    x, w = torch.randn(64, 32), torch.randn(32, 16)
    counts = count(lambda: x @ w)
    b = budget(10e-6, 0.0, 90e-6, host_issue_s=50e-6, by_unit={"fp32": 90e-6})
    graph = GraphReplay(True, None, 100e-6, 90e-6, 100 / 90, 100 / 90, True)
    r = {x.name: x for x in remedies_for(b, counts, round_cuda_ceilings, "cuda", None, graph)}
    assert r["TF32 matmuls"].predicted_speedup == pytest.approx(
        100 / floor_ms(90 / 7, 50, 100, 90, 50))
    assert r["CUDA graphs"].predicted_speedup == pytest.approx(100 / 90)


@pytest.mark.cuda
def test_on_cuda_a_gpu_bound_call_issues_fast_and_a_sync_gets_none():
    # a 4096^2 fp32 matmul chain takes milliseconds of GPU and microseconds of host: its
    # issue time is a small share of T_wall; the same call ending in .item() waits
    import time

    from gobrrr.host_issue import cuda_hold
    from gobrrr.timing import device_sync

    a = torch.randn(4096, 4096, device="cuda")

    def chain():
        y = a
        for _ in range(8):
            y = y @ a
        return y

    sync = device_sync("cuda")
    chain()
    sync()
    t0 = time.perf_counter()
    chain()
    sync()
    wall_s = time.perf_counter() - t0
    hold = cuda_hold()
    assert hold is not None
    got = measure_host_issue(chain, wall_s, 1.0, hold, sync)
    assert got.issue_s is not None and got.issue_s < 0.2 * wall_s, got
    waits = measure_host_issue(lambda: chain().sum().item(), wall_s, 1.0, hold, sync)
    assert waits.issue_s is None and "waited for the GPU" in waits.note

    def checks_first():  # a host check of an input first, as transformers' mask check
        a[0, 0].item()
        return chain()

    first = measure_host_issue(checks_first, wall_s, 1.0, hold, sync)
    assert first.issue_s is not None and first.issue_s < 0.2 * wall_s, first
    assert "timed with the GPU running" in first.note


def _records():
    """X = A @ W; Y = X + 1; Z = gelu(Y); a view of Z; U = Z' @ W; V = U + 1; C = V
    copied: two extern GEMMs and two fusable chains (the second with its copy)."""
    from gobrrr.counting import OpRecord

    ops = [("aten::mm", "matmul", (1, 2), 10), ("aten::add", "pointwise", (10,), 11),
           ("aten::gelu", "pointwise", (11,), 12), ("aten::view", "view", (12,), 12),
           ("aten::mm", "matmul", (12, 2), 13), ("aten::add", "pointwise", (13,), 14),
           ("aten::clone", "copy", (14,), 15)]
    return [OpRecord(index=i, op=op, module="Global", phase="forward", op_class=cls,
                     dtype="fp32", flops=0, bytes=0, tensor_core_unit=None,
                     has_formula=True, reads=reads, writes=((out, 4),))
            for i, (op, cls, reads, out) in enumerate(ops)]


def test_the_default_compile_launches_one_kernel_per_chain_and_extern_call():
    from gobrrr.fusion_estimate import compiled_launches

    # every op that launched one kernel but the view, and one kernel outside any op
    assert compiled_launches(_records(), [0, 1, 2, 4, 5, 6, None]) == (7, 5)
    # an op launching three kernels (cuDNN's transposes around a convolution) is one call
    assert compiled_launches(_records(), [0, 0, 0, 1, 2, 4, 5, 6]) == (8, 4)
    # a chain broken by a GEMM between its ops stays two kernels
    assert compiled_launches(_records()[:4], [1, 2]) == (2, 1)


def test_the_default_compile_on_cuda_issues_fewer_launches(round_cuda_ceilings):
    # a host-bound call on CUDA: T 8 ms, 1 ms of kernels (7 of them, 5 after fusion),
    # issued in 8 ms. The issue time scales with the launches: 8 x 5/7 = 5.714 ms; the
    # idle time with it: 7 x 2/7 = 2 ms saved, T - saved = 6 ms, above the floor
    # (1 ms of kernels beside 5.714 of issuing, scaled by 8 / hypot(1, 8): 5.757 ms)
    from gobrrr.budget import KernelRow
    from gobrrr.remedies.compiled import predict_default

    kernels = [KernelRow("k", i, None, 1e-3 / 7, "memory") for i in (0, 1, 2, 4, 5, 6, None)]

    class Ctx:  # what the compile's prediction reads of a Context
        device, diagnosed, records = "cuda", True, _records()
        ceilings, param_storages = round_cuda_ceilings, ()
        budget = replace(budget(7e-3, 1e-3, 0.0, host_issue_s=8e-3), kernels=kernels)
        graph = None

    g = predict_default(Ctx())
    assert g.host_left_s == pytest.approx(8e-3 * 5 / 7)
    assert g.saved_s == {"overhead": pytest.approx(2e-3)}
    assert floor_ms(1, 8 * 5 / 7, 8, 1, 8) == pytest.approx(5.757, abs=1e-3)
    assert g.speedup == pytest.approx(8 / 6)
    assert g.basis == ("Inductor's fusion launches ~5 kernels where eager launched 7: the "
                       "host's issue time 8 ms scales with them to 5.71 ms (each launch "
                       "costing what an eager one did, an upper bound), and the GPU's idle "
                       "time between launches with it: 2 ms")
    # beside a remedy that shortens the kernels, the issuing it leaves is the floor
    both = combine(Ctx.budget, [gain_from_saved(Ctx.budget, {"memory": 0.9e-3}, "x"), g])
    assert both.speedup == pytest.approx(8 / floor_ms(0.1, 8 * 5 / 7, 8, 1, 8))
    # a measured replay of every kernel (8 -> 7 ms) removed 1 ms: fewer launches remove
    # no more than that
    Ctx.graph = GraphReplay(True, None, 8e-3, 7e-3, 8 / 7, 8, False)
    capped = predict_default(Ctx())
    assert capped.saved_s == {"overhead": pytest.approx(1e-3)}
    assert capped.speedup == pytest.approx(8 / 7)
    assert capped.basis.endswith(", capped at the 1 ms the graph-replay experiment "
                                 "removed with every launch gone (1.14x)")
    # a replay that removed more leaves the scaling's 2 ms
    Ctx.graph = GraphReplay(True, None, 8e-3, 4e-3, 2.0, 8, False)
    assert predict_default(Ctx()).saved_s == {"overhead": pytest.approx(2e-3)}
    Ctx.graph = None
    # no measured issue time (a trace): fusion alone, as before
    Ctx.budget = replace(Ctx.budget, host_issue_s=None)
    assert predict_default(Ctx()).speedup is None
