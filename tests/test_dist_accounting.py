"""The communication accounting (gobrrr.dist.accounting): exact arithmetic on hand-made
traces, and the real H200 x2 traces of examples:ddp_comm (trimmed to the profiled window's
device work, DDP's reducer ranges and their launches: tests/data/dist/), with the
unprofiled timings of the same run (its report: T_wall and no_sync per rank)."""

import gzip
import json
from dataclasses import replace
from pathlib import Path

import pytest

from gobrrr.dist.accounting import (
    PROFILED_WAITING_NOTE,
    TRACE_PACES,
    account,
    caused_waiting,
    no_sync_comparison,
    trace_paces,
    waiting_from_paces,
)
from gobrrr.dist.comm import Collective, RankTrace, match_collectives
from gobrrr.dist.commread import read_trace
from gobrrr.dist.experiments import NoSync
from gobrrr.dist.merge import STRAGGLER_FRACTION, RankSummary, merge
from gobrrr.schema import SCHEMAS, load_schema

DATA = Path(__file__).parent / "data" / "dist"

# The H200 x2 run's report (2026-11-30, ddp_comm): each rank's T_wall and its lockstep
# sync / no_sync steps, seconds.
H200_WALL = {0: 0.006913724000000343, 1: 0.006870380999998815}
H200_SYNC = {0: 0.007152140999998835, 1: 0.007084442000000024}
H200_NO_SYNC = {0: 0.00446193499999481, 1: 0.004872659000000112}


def _coll(seq, start, dur):
    return Collective("0", seq, "all_reduce", 4000, start, dur)


def test_waiting_from_paces_exact():
    # every rank waits for the slowest pace: 5 ms; rank 0 (3 ms) waits 2, rank 2 none
    assert waiting_from_paces({0: 0.003, 1: 0.004, 2: 0.005}) == pytest.approx(
        {0: 0.002, 1: 0.001, 2: 0.0})


def _pair(source):
    # rank 0 issues the one all-reduce at 0 and waits for rank 1 (issues at 60); both end
    # at 100: transfer 40 us, rank 0 waits 60 us. 2 steps in a 1000 us window.
    r0 = RankTrace(0, 2, 1000, [_coll(0, 0, 100)], compute=[(0, 30)], source=source,
                   bucket_copy=[(200, 250), (240, 300)])
    r1 = RankTrace(1, 2, 1000, [_coll(0, 60, 40)], compute=[(0, 60)], source=source)
    matched, _ = match_collectives([r0, r1])
    return r0, r1, matched


def test_account_cuda_kernel_seconds_and_paces():
    r0, r1, matched = _pair("cuda")
    a = account(r0, matched, wall_s=0.5, no_sync_s={0: 0.001, 1: 0.0013})
    # CUDA: kernel seconds per step, T_wall plays no part: transfer [60,100) = 40 us
    # over 2 steps = 20 us; profiled waiting [0,60) minus compute [0,30) = 30 us / 2 = 15
    assert a.transfer_s == pytest.approx(20e-6)
    assert a.waiting_profiled_s == pytest.approx(15e-6)
    # the estimate: 1.3 ms - 1.0 ms = 0.3 ms per step, used in the budget
    assert (a.waiting_s, a.waiting_source) == (pytest.approx(300e-6), "no_sync paces")
    assert a.communication_s == pytest.approx(320e-6)
    # bucket copies: union [200,300) = 100 us / 2 steps = 50 us
    assert a.ddp_bucket_copy_s == pytest.approx(50e-6)
    assert a.communication_total_s == pytest.approx(50e-6)  # 100 us / 2
    # no no_sync experiment: the profiled waiting, said so by its source
    b = account(r0, matched, wall_s=0.5)
    assert (b.waiting_s, b.waiting_source) == (pytest.approx(15e-6), "profiled steps")
    assert "overstates" in PROFILED_WAITING_NOTE


def test_account_cpu_share_of_window():
    r0, _r1, matched = _pair("cpu")
    # CPU: share of the 1000 us window x T_wall 0.5 s: transfer 40/1000 x 0.5 = 20 ms
    # the profiled waiting even with no_sync paces (the profiler slows every thread alike)
    a = account(r0, matched, wall_s=0.5, no_sync_s={0: 0.001, 1: 0.0013})
    assert a.transfer_s == pytest.approx(0.020)
    assert (a.waiting_s, a.waiting_source) == (pytest.approx(0.015), "profiled steps")
    assert a.time_basis.startswith("share")


def test_caused_waiting_attributes_the_estimate_to_the_late_rank():
    r0, r1, matched = _pair("cuda")
    paces = {0: 0.001, 1: 0.0013}
    accs = [account(t, matched, 0.5, paces) for t in (r0, r1)]
    # rank 1 was late in the one collective: rank 0's 0.3 ms estimate is rank 1's doing
    assert caused_waiting(matched, accs, paces) == pytest.approx({0: 0.0, 1: 300e-6})


def test_no_sync_comparison_explains_each_direction():
    acc = {"communication_s": 0.002, "ddp_bucket_copy_s": 0.0005}
    # sync 10 ms, bound 30%: 20% + 5% copies = 25%; the other 5 points: SM sharing
    c = no_sync_comparison(acc, {"sync_s": 0.01, "no_sync_s": 0.007, "bound_s": 0.003,
                                 "bound_fraction": 0.3})
    assert c is not None
    assert (c["exposed_fraction"], c["with_bucket_copies_fraction"]) == pytest.approx(
        (0.2, 0.25))
    assert c["gap_fraction"] == pytest.approx(0.05) and "SMs" in c["explanation"]
    # bound 26%: within 3 points of 25%: the copies explain it
    c = no_sync_comparison(acc, {"sync_s": 0.01, "bound_s": 0.0026, "bound_fraction": 0.26})
    assert c is not None and "explain the gap" in c["explanation"]
    # bound 15%: below the trace's figure: the bound is not strict
    c = no_sync_comparison(acc, {"sync_s": 0.01, "bound_s": 0.0015, "bound_fraction": 0.15})
    assert c is not None and "not strict" in c["explanation"]
    assert no_sync_comparison(acc, {"skipped": "no DDP", "bound_s": None}) is None


def _h200_traces():
    return [read_trace(json.loads(gzip.open(DATA / f"h200_ddp_comm_rank{r}.json.gz", "rt")
                                  .read()), r, 3, "cuda") for r in (0, 1)]


def test_h200_ddp_comm_accounting():
    traces = _h200_traces()
    matched, notes = match_collectives(traces)
    # 12 all-reduces of one 4096^2 fp32 layer (+ bias) per step, 3 steps, every one late
    # on rank 1 (its CPU launched them 300-450 us after rank 0's in the profile)
    assert (len(matched), notes) == (36, [])
    assert {m.bytes for m in matched} == {(4096 * 4096 + 4096) * 4}
    assert all(m.late_rank == 1 for m in matched)
    accs = [account(t, matched, H200_WALL[t.rank], H200_NO_SYNC) for t in traces]
    a0, a1 = accs
    # transfer: kernel seconds per step (the NCCL kernels' exposed time / 3 steps)
    assert a0.transfer_s == pytest.approx(2.695e-3, abs=2e-6)
    assert a1.transfer_s == pytest.approx(2.483e-3, abs=2e-6)
    # waiting: profiled 3.93 ms on rank 0; the pace estimate 4.873 - 4.462 = 0.411 ms
    assert a0.waiting_profiled_s == pytest.approx(3.926e-3, abs=2e-6)
    assert a0.waiting_s == pytest.approx(H200_NO_SYNC[1] - H200_NO_SYNC[0])
    assert a1.waiting_s == 0.0
    # DDP's bucket copies: 24 mul_out kernels (copy into the bucket / world size) and 24
    # DtoD memcpys (copy back) per step, ~805 MB of fp32 gradients each way
    assert a0.ddp_bucket_copy_s == pytest.approx(0.934e-3, abs=2e-6)
    assert a1.ddp_bucket_copy_s == pytest.approx(0.823e-3, abs=2e-6)
    # shares of the sync step beside the no_sync bound (37.6% and 31.2%): both within
    # 10 points (the profiled window scaled to T_wall gave 56.5% and 20.6%)
    for a in accs:
        r = a.rank
        ns = {"sync_s": H200_SYNC[r], "no_sync_s": H200_NO_SYNC[r],
              "bound_s": H200_SYNC[r] - H200_NO_SYNC[r],
              "bound_fraction": 1 - H200_NO_SYNC[r] / H200_SYNC[r]}
        c = no_sync_comparison(a.to_dict(), ns)
        assert c is not None
        assert abs(c["exposed_fraction"] - c["bound_fraction"]) < 0.10
    # no straggler: rank 1 costs rank 0 0.41 ms of a 6.89 ms step (6%); the profiled
    # waiting (3.93 ms, 57%) would have named it
    caused = caused_waiting(matched, accs, H200_NO_SYNC)
    median_wall = (H200_WALL[0] + H200_WALL[1]) / 2
    assert caused[1] / median_wall == pytest.approx(0.0596, abs=0.001)
    assert caused[1] / median_wall < STRAGGLER_FRACTION
    assert a0.waiting_profiled_s / median_wall > STRAGGLER_FRACTION


def test_h200_ddp_comm_merge_validates():
    traces = _h200_traces()
    matched, _ = match_collectives(traces)
    gathered = []
    for t in traces:
        r = t.rank
        a = account(t, matched, H200_WALL[r], H200_NO_SYNC)
        comm = a.communication_s
        mem = H200_WALL[r] - comm
        gathered.append(RankSummary(
            r, "h", H200_WALL[r],
            {"overhead": 0.0, "memory": mem, "compute": 0.0, "communication": comm},
            {"overhead": 0.0, "memory": mem / H200_WALL[r], "compute": 0.0,
             "communication": comm / H200_WALL[r]}, "memory", t, a,
            NoSync(H200_SYNC[r], H200_NO_SYNC[r])))
    d = merge(gathered, world_size=2, backend="nccl", device="cuda", timeout_s=60).to_dict()
    assert d["stragglers"] == []
    r0 = d["ranks"][0]
    assert r0["waiting_source"] == "no_sync paces"
    assert r0["exposed_waiting_profiled_s"] > r0["exposed_waiting_s"]
    assert r0["ddp_bucket_copy_s"] == pytest.approx(0.934e-3, abs=2e-6)
    assert r0["no_sync_comparison"]["bound_fraction"] == pytest.approx(0.376, abs=0.001)
    assert PROFILED_WAITING_NOTE not in d["notes"]
    _validate_distributed(d)


def _validate_distributed(d):
    """The report schema's `distributed` part, with the root's $defs and every schema
    registered (the projection is referred to by its URN)."""
    import jsonschema
    from referencing import Registry, Resource

    root = load_schema("report")
    registry = Registry().with_resources(
        (s["$id"], Resource.from_contents(s)) for s in map(load_schema, SCHEMAS))
    part = root["properties"]["distributed"] | {"$defs": root["$defs"]}
    jsonschema.Draft202012Validator(part, registry=registry).validate(d)


def _skewed_pair():
    """Two steps, one all-reduce each. Step 0: rank 1 issues 60 us after rank 0 (rank 0
    waits 60 us); step 1: rank 0 issues 50 us after rank 1 (rank 1 waits 50 us). Each
    transfer 40 us, no compute: a profiler's skew, no rank late in every step."""
    r0 = RankTrace(0, 2, 1000, [Collective("0", 0, "all_reduce", 4000, 0, 100, step=0),
                                Collective("0", 1, "all_reduce", 4000, 550, 40, step=1)],
                   source="cuda")
    r1 = RankTrace(1, 2, 1000, [Collective("0", 0, "all_reduce", 4000, 60, 40, step=0),
                                Collective("0", 1, "all_reduce", 4000, 500, 90, step=1)],
                   source="cuda")
    return r0, r1, match_collectives([r0, r1])[0]


def test_waiting_without_paces_is_the_least_of_the_profiled_steps():
    r0, r1, matched = _skewed_pair()
    a0, a1 = account(r0, matched, wall_s=0.5), account(r1, matched, wall_s=0.5)
    # profiled: rank 0 waited 60 us in 2 steps (30 per step), rank 1 50 (25 per step);
    # each waited 0 in one of its steps: that is what is taken
    assert a0.waiting_profiled_s == pytest.approx(30e-6)
    assert a1.waiting_profiled_s == pytest.approx(25e-6)
    assert (a0.waiting_s, a1.waiting_s) == (0.0, 0.0)
    assert a0.waiting_source == "the least of the profiled steps"
    assert a0.transfer_s == pytest.approx(40e-6)  # 2 x 40 us over 2 steps
    # the no_sync paces, where measured, still decide
    assert account(r0, matched, 0.5, {0: 0.001, 1: 0.0013}).waiting_s == pytest.approx(3e-4)


def test_a_rank_late_in_every_step_keeps_its_peer_waiting():
    r0 = RankTrace(0, 2, 1000, [Collective("0", 0, "all_reduce", 4000, 0, 100, step=0),
                                Collective("0", 1, "all_reduce", 4000, 500, 80, step=1)],
                   source="cuda")
    r1 = RankTrace(1, 2, 1000, [Collective("0", 0, "all_reduce", 4000, 60, 40, step=0),
                                Collective("0", 1, "all_reduce", 4000, 540, 40, step=1)],
                   source="cuda")
    matched = match_collectives([r0, r1])[0]
    a0 = account(r0, matched, wall_s=0.5)
    # rank 0 waited 60 and 40 us: the least step, 40 us, against 50 on average
    assert a0.waiting_profiled_s == pytest.approx(50e-6)
    assert a0.waiting_s == pytest.approx(40e-6)
    # steps not known (a trace read before the steps were recorded): the average
    r0.collectives = [Collective(**{**c.__dict__, "step": -1}) for c in r0.collectives]
    assert account(r0, matched, wall_s=0.5).waiting_s == pytest.approx(50e-6)


def _host_bound_pair(host0_us=1900.0, host1_us=2000.0):
    """Two host-bound ranks (examples:fsdp_comm on two H200s, scaled down): rank 0
    launches each step's all-gather early and its kernel spins until rank 1 launches
    its own, 400 us later in both profiled steps; each GPU has 100 us of other work a
    step; the hosts' own time per 2 steps is host0_us and host1_us."""
    r0 = RankTrace(0, 2, 2000, [Collective("0", 0, "all_gather", 4000, 100, 420, step=0),
                                Collective("0", 1, "all_gather", 4000, 1100, 420, step=1)],
                   compute=[(0, 100), (1000, 1100)], source="cuda", host_us=host0_us)
    r1 = RankTrace(1, 2, 2000, [Collective("0", 0, "all_gather", 4000, 500, 20, step=0),
                                Collective("0", 1, "all_gather", 4000, 1500, 20, step=1)],
                   compute=[(0, 100), (1000, 1100)], source="cuda", host_us=host1_us)
    return r0, r1, match_collectives([r0, r1])[0]


def test_trace_paces_take_the_host_where_it_is_slower():
    r0, r1, matched = _host_bound_pair()
    # per step: host 950 / 1000 us against the device's 100 us of work + 20 us of
    # exposed transfer
    assert trace_paces([r0, r1], matched) == pytest.approx({0: 950e-6, 1: 1000e-6})
    # a device-bound rank: its device's pace
    fast = replace(r1, host_us=20.0)
    assert trace_paces([r0, fast], matched)[1] == pytest.approx(120e-6)
    # a trace without its host time (doctor's window, a CPU trace): no paces
    assert trace_paces([r0, replace(r1, host_us=None)], matched) is None
    assert trace_paces([r0, replace(r1, source="cpu")], matched) is None


def test_a_host_bound_ranks_spinning_kernels_are_not_its_waiting():
    r0, r1, matched = _host_bound_pair()
    paces = trace_paces([r0, r1], matched)
    a0 = account(r0, matched, wall_s=1e-3, paces_s=paces)
    # the profiled steps: 400 us of spinning in each; the paces: 1000 - 950 us a step
    assert a0.waiting_profiled_s == pytest.approx(400e-6)
    assert a0.waiting_s == pytest.approx(50e-6)
    assert a0.waiting_source == TRACE_PACES
    assert account(r1, matched, wall_s=1e-3, paces_s=paces).waiting_s == 0.0
    # the paces never raise the waiting: the profiled steps' stays where it is smaller
    # (both steps waited 400 us: the least step's is the same, the profiled one named)
    a0 = account(r0, matched, wall_s=1e-3, paces_s={0: 50e-6, 1: 1000e-6})
    assert a0.waiting_s == pytest.approx(400e-6)
    assert a0.waiting_source == "profiled steps"
    # measured no_sync paces still decide
    assert account(r0, matched, 1e-3, {0: 0.001, 1: 0.0011},
                   paces_s=paces).waiting_s == pytest.approx(1e-4)


def test_host_time_leaves_out_the_calls_that_wait_for_the_device():
    from gobrrr.dist.commread import read_trace

    def x(cat, name, ts, dur, tid=1, **args):
        return {"ph": "X", "cat": cat, "name": name, "pid": 1, "tid": tid, "ts": ts,
                "dur": dur, "args": args}

    meta = {"Collective name": "allreduce", "In msg nelems": 1000, "Out msg nelems": 1000,
            "dtype": "Float", "Process Group Name": "0"}
    events = [x("cpu_op", "ProfilerStep#1", 0, 1000), x("cpu_op", "aten::mm", 10, 100),
              x("cuda_runtime", "cudaLaunchKernel", 20, 5, correlation=1),
              x("kernel", "gemm", 30, 300, tid=7, correlation=1, device=0, stream=7),
              x("cuda_runtime", "cudaLaunchKernel", 200, 5, correlation=2),
              x("kernel", "ncclDevKernel_AllReduce", 400, 100, tid=8, correlation=2,
                device=0, stream=8, **meta),
              # the step's end waits for the device: 300 us, not the host's own
              x("cuda_runtime", "cudaDeviceSynchronize", 600, 300),
              # another thread's wait is not the step thread's
              x("cuda_runtime", "cudaStreamSynchronize", 100, 400, tid=2)]
    t = read_trace({"traceEvents": events}, 0, 1, "cuda", window="ProfilerStep#")
    assert t.host_us == pytest.approx(700.0)
    assert [c.name for c in t.collectives] == ["all_reduce"]
    # doctor's own window (a user annotation) reads it the same way
    ann = [*events[1:], x("user_annotation", "gobrrr:dist-window", 0, 1000)]
    assert read_trace({"traceEvents": ann}, 0, 1, "cuda").host_us == pytest.approx(700.0)


class _Exchange:
    """The lockstep's all_gather as rank 0 sees it: its own object and rank 1's, given
    per stage (the diagnosis's `_account` exchanges the collectives, then the paces)."""

    def __init__(self, rank1: dict[str, object]) -> None:
        self.rank1, self.stages = rank1, []

    def all_gather(self, obj: object, what: str) -> list[object]:
        self.stages.append(what)
        return [obj, self.rank1[what]]


def test_doctor_without_no_sync_paces_exchanges_each_ranks_trace_pace():
    # --no-experiments (or a step neither DDP's nor FSDP2's): doctor takes the paces
    # from the ranks' own traces, as analyze does; the exchanged traces carry no compute
    from gobrrr.dist.accounting import trace_pace
    from gobrrr.dist.diagnose import _account

    r0, r1, matched = _host_bound_pair()
    shared = r1.to_dict() | {"compute": [], "blocked": [], "bucket_copy": []}
    ex = _Exchange({"sharing the collectives": (shared, None),
                    "sharing the paces": trace_pace(r1, matched)})
    a0 = _account(ex, r0, 1e-3, None)
    assert ex.stages == ["sharing the collectives", "sharing the paces"]
    assert a0.waiting_source == TRACE_PACES
    assert a0.waiting_s == pytest.approx(50e-6)  # 1000 - 950 us a step, not 400
    # a rank whose trace gives no pace (no host time read): the profiled rule stays
    ex = _Exchange({"sharing the collectives": (shared, None), "sharing the paces": None})
    assert _account(ex, r0, 1e-3, None).waiting_source != TRACE_PACES
    # with every rank's no_sync pace the paces are not exchanged
    nosync = NoSync(sync_s=1e-3, no_sync_s=0.9e-3)
    ex = _Exchange({"sharing the collectives": (shared, 0.95e-3)})
    a0 = _account(ex, r0, 1e-3, nosync)
    assert ex.stages == ["sharing the collectives"] and a0.waiting_source == "no_sync paces"
    assert a0.waiting_s == pytest.approx(50e-6)
