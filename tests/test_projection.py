"""The multi-GPU projection: exact, hand-computed arithmetic of the alpha-beta model
(dist/projection.py), the overlap rule, the sensitivity lines, the 2-GPU check, and the
table and figure built from it."""

import math

import pytest

from gobrrr.dist import projection as pj
from gobrrr.dist.ceilings import CommCeilings
from gobrrr.dist.projection import Links, StepInputs
from gobrrr.schema import SchemaError, kind_of, validate

MB = 1e6


def flat(busbw=100e9, inter=400e9, latency=0.0, per_node=8):
    return Links.constant(busbw, inter_node_bytes_per_s=inter, inter_hop_latency_s=latency,
                          gpus_per_node=per_node)


def test_all_reduce_on_two_gpus():
    # 2 GPUs, 100 MB, 100 GB/s busbw: 2*(1/2)*100e6/100e9 = 1 ms
    assert pj.collective_time_s("all_reduce", 100 * MB, 2, flat()) == pytest.approx(1e-3)
    # all-gather and reduce-scatter: (1/2)*100e6/100e9 = 0.5 ms
    assert pj.collective_time_s("all_gather", 100 * MB, 2, flat()) == pytest.approx(0.5e-3)
    assert pj.collective_time_s("reduce_scatter", 100 * MB, 2, flat()) == pytest.approx(
        0.5e-3)
    assert pj.collective_time_s("all_reduce", 100 * MB, 1, flat()) == 0.0


def test_two_nodes_of_eight():
    # n=16, g=8, m=2: intra 2*(7/8)*100e6/100e9 = 1.75 ms; inter 2*(1/2)*100e6/400e9
    # = 0.25 ms; total 2 ms without latency.
    assert pj.collective_time_s("all_reduce", 100 * MB, 16, flat()) == pytest.approx(2e-3)
    # Latency 14 us per step: all-reduce min(2(m-1), 2 ceil(log2 m)) = min(2, 2) = 2 steps
    # -> + 28 us.
    t = pj.collective_time_s("all_reduce", 100 * MB, 16, flat(latency=14e-6))
    assert t == pytest.approx(2e-3 + 28e-6)
    # 1024 GPUs = 128 nodes: ring 2*127 = 254 steps, tree 2*7 = 14: the tree's 14.
    # intra 1.75 ms + inter 2*(127/128)*100e6/400e9 = 0.49609375 ms + 14*14 us = 0.196 ms
    t = pj.collective_time_s("all_reduce", 100 * MB, 1024, flat(latency=14e-6))
    assert t == pytest.approx(1.75e-3 + 0.49609375e-3 + 0.196e-3)
    # all-gather across 128 nodes has only the ring: 127 steps.
    t = pj.collective_time_s("all_gather", 100 * MB, 1024, flat(latency=14e-6))
    assert t == pytest.approx(0.875e-3 + 0.248046875e-3 + 127 * 14e-6)


def test_overlap_rule():
    # comm 2 ms, compute 10 ms, half hidden: 10 + 2 - 1 = 11 ms
    assert pj.step_time_s(10e-3, 2e-3, 0.5) == pytest.approx(11e-3)
    # all of it hideable but only 1 ms of compute to hide it under: 1 + 2 - 1 = 2 ms
    assert pj.step_time_s(1e-3, 2e-3, 1.0) == pytest.approx(2e-3)
    assert pj.step_time_s(10e-3, 2e-3, 0.0) == pytest.approx(12e-3)
    assert pj.overlap_from(4.0, 1.0) == 0.75
    assert pj.overlap_from(0.0, 0.0) == 1.0
    assert pj.overlap_from(1.0, 2.0) == 0.0  # exposed above total (noise): clamped


def test_ddp_and_fsdp_steps():
    step = StepInputs(compute_s=10e-3, grad_bytes=100 * MB, param_bytes=100 * MB,
                      overlap_fraction=0.0, ddp_buckets=1)
    # DDP on 2: 1 ms all-reduce, step 11 ms, efficiency 10/11
    assert pj.comm_time_s("ddp", step, 2, flat()) == pytest.approx(1e-3)
    # FSDP on 2: two all-gathers of 0.5 ms + one reduce-scatter of 0.5 ms = 1.5 ms
    assert pj.comm_time_s("fsdp", step, 2, flat()) == pytest.approx(1.5e-3)
    p = pj.project(step, flat(), gpu_counts=(2, 16), sensitivity_at=16)
    r2 = p.row(2)
    assert r2.ddp_step_s == pytest.approx(11e-3) and r2.ddp_efficiency == pytest.approx(10 / 11)
    assert r2.fsdp_step_s == pytest.approx(11.5e-3)
    assert p.row(16).nodes == 2 and p.row(2).nodes == 1
    # Buckets: 4 of 25 MB cost the same bandwidth time as one of 100 MB (no latency here).
    four = StepInputs(10e-3, 100 * MB, 100 * MB, 0.0, ddp_buckets=4)
    assert pj.comm_time_s("ddp", four, 2, flat()) == pytest.approx(1e-3)
    # Default buckets: ceil(100e6 / 25 MiB) = ceil(3.81) = 4
    assert StepInputs(1.0, 100 * MB, 0, 0.0).buckets() == 4
    with pytest.raises(ValueError, match="strategy"):
        pj.comm_time_s("zero3", step, 2, flat())


def test_fsdp_host_work_and_gathers_per_unit():
    # FSDP's host work is in the FSDP step only, at every n; DDP's step has none of it
    step = StepInputs(compute_s=10e-3, grad_bytes=100 * MB, param_bytes=100 * MB,
                      overlap_fraction=0.0, ddp_buckets=1, fsdp_host_s=20e-3)
    p = pj.project(step, flat(), gpu_counts=(2,), sensitivity_at=2)
    # FSDP on 2: 10 + 20 + 1.5 ms of collectives; efficiency 10 / 31.5
    assert p.row(2).fsdp_step_s == pytest.approx(31.5e-3)
    assert p.row(2).fsdp_efficiency == pytest.approx(10 / 31.5)
    assert p.row(2).ddp_step_s == pytest.approx(11e-3)
    # overlap may hide communication under the host work too: all of 1.5 ms
    hidden = StepInputs(10e-3, 100 * MB, 100 * MB, 1.0, fsdp_host_s=20e-3)
    assert pj.strategy_step_s("fsdp", hidden, 2, flat()) == pytest.approx((1.5e-3, 30e-3))
    # units that keep their parameters after forward gather once: 0.5 + 0.5 ms
    kept = StepInputs(10e-3, 100 * MB, 100 * MB, 0.0, fsdp_gathers_per_unit=1.0)
    assert pj.comm_time_s("fsdp", kept, 2, flat()) == pytest.approx(1e-3)
    c = pj.check_projection(step, flat(), 30e-3, strategy="fsdp")
    assert c["projected_step_s"] == pytest.approx(31.5e-3) and c["strategy"] == "fsdp"
    assert c["rel_error"] == pytest.approx(1.5 / 30)


def _fsdp_section(no_sync):
    """A merged distributed section of a 2-rank FSDP2 step (the shape merge.py writes):
    35 ms a step, 5 ms of it exposed transfer, 12 units of 10 MB gathered twice."""
    rank = {"rank": 0, "wall_s": 35e-3, "exposed_transfer_s": 5e-3,
            "exposed_waiting_s": 0.0, "exposed_waiting_profiled_s": 0.0,
            "communication_total_s": 5e-3, "no_sync": no_sync}
    return {"world_size": 2, "ranks": [rank], "step_time": {"median_s": 35e-3},
            "collectives": [
                {"collective": "all_gather", "calls_per_step": 24.0, "busbw_gbps": 100.0},
                {"collective": "reduce_scatter", "calls_per_step": 12.0,
                 "busbw_gbps": 100.0}]}


def test_an_fsdp_job_is_projected_with_its_host_work():
    from gobrrr.dist.context import projection_for
    from gobrrr.dist.experiments import FSDP_METHOD

    ns = {"sync_s": 35e-3, "no_sync_s": 8e-3, "method": FSDP_METHOD}
    out = projection_for(_fsdp_section(ns), int(120 * MB), int(120 * MB), None, None)
    inputs = out["projection"]["inputs"]
    # host work = 35 - 5 exposed - 8 unsharded = 22 ms; 12 units, 24 / 12 gathers each
    assert inputs["fsdp_host_s"] == pytest.approx(22e-3)
    assert (inputs["compute_s"], inputs["fsdp_units"], inputs["fsdp_gathers_per_unit"]) == (
        pytest.approx(8e-3), 12, 2.0)
    check = out["projection_check"]
    # 12 x (2 x 0.5 x 10 MB + 0.5 x 10 MB) / 100 GB/s = 1.8 ms, none hidden (overlap 0):
    # 8 + 22 + 1.8 = 31.8 ms against 35 ms
    assert check["strategy"] == "fsdp"
    assert check["projected_step_s"] == pytest.approx(31.8e-3)
    assert "FSDP model" in check["note"]
    # without the unsharded step the host work stays inside compute_s: 35 - 5 = 30 ms
    out = projection_for(_fsdp_section(None), int(120 * MB), int(120 * MB), None, None)
    assert out["projection"]["inputs"]["compute_s"] == pytest.approx(30e-3)
    assert out["projection"]["inputs"]["fsdp_host_s"] == 0.0
    assert out["projection_check"]["projected_step_s"] == pytest.approx(31.8e-3)


def test_sensitivity_lines():
    step = StepInputs(compute_s=10e-3, grad_bytes=100 * MB, param_bytes=100 * MB,
                      overlap_fraction=0.5, ddp_buckets=1)
    p = pj.project(step, flat(), gpu_counts=(2, 16), sensitivity_at=16)
    by = {(s["assumption"], s["value"]): s for s in p.sensitivity}
    # Base at 16 GPUs: DDP comm 2 ms, half hidden: step 11 ms, efficiency 10/11.
    base = 10 / 11
    # Inter-node halved: inter 0.5 ms, comm 2.25 ms, step 10 + 2.25/2 = 11.125 ms
    assert by[("inter-node bandwidth", "x0.5")]["ddp_efficiency"] == pytest.approx(
        10 / 11.125)
    # Overlap 0: step 12 ms; overlap 1: 10 ms (all of 2 ms hidden under 10 ms)
    assert by[("overlap", "0")]["ddp_efficiency"] == pytest.approx(10 / 12)
    assert by[("overlap", "1")]["ddp_efficiency"] == pytest.approx(1.0)
    assert by[("overlap", "0")]["ddp_change_points"] == pytest.approx(100 * (10 / 12 - base))
    # The biggest mover is overlap: FSDP comm at 16 = 2 x 1 ms (all-gathers: 0.875 + 0.125)
    # + 1 ms = 3 ms, step 10 + 1.5 = 11.5 ms; with overlap 1: 10 ms, +13 points.
    assert by[("overlap", "1")]["fsdp_change_points"] == pytest.approx(100 * (1 - 10 / 11.5))
    assert "overlap moves it most: with overlap 1, DDP +9 points, FSDP +13" in p.conclusion
    assert p.conclusion.startswith("At 16 GPUs: DDP 91%")


def test_check_projection_relative_error():
    step = StepInputs(10e-3, 100 * MB, 0, 0.0, ddp_buckets=1)
    # projected 11 ms, measured 12.1 ms: (11 - 12.1)/12.1 = -1/11
    c = pj.check_projection(step, flat(), 12.1e-3)
    assert c["projected_step_s"] == pytest.approx(11e-3)
    assert c["rel_error"] == pytest.approx(-1 / 11)


def test_links_from_ceilings_use_the_measured_curve():
    from gobrrr.dist.ceilings import CollectivePoint

    def pt(c, s, busbw):
        return CollectivePoint(c, s, 1.0, 1.0, busbw, 3, 1)

    ceil = CommCeilings(topology={"gpu_names": []}, key={}, world_size=2, backend="nccl",
                        dtype="fp32", measured_at="", calibrate_s=0.0,
                        points=[pt("all_reduce", 10**6, 50e9), pt("all_reduce", 10**8, 100e9)])
    links = pj.links_from_ceilings(ceil, inter_node_bytes_per_s=pj.gbps_to_bytes_per_s(3200))
    assert links.inter_node_bytes_per_s == 400e9  # 3200 Gb/s / 8
    # 10 MB is halfway in log10 between 1 MB (50 GB/s) and 100 MB (100 GB/s): 75 GB/s;
    # on 2 GPUs: 2*(1/2)*10e6/75e9 s
    t = pj.collective_time_s("all_reduce", 10 * MB, 2, links)
    assert t == pytest.approx(10e6 / 75e9)
    default = pj.links_from_ceilings(ceil)
    assert default.inter_node_bytes_per_s == 400e9  # datasheet: 8 x 400 Gb/s NDR


def _projection():
    step = StepInputs(compute_s=50e-3, grad_bytes=400 * MB, param_bytes=400 * MB,
                      overlap_fraction=0.6)
    return pj.project(step, flat(busbw=360e9, latency=pj.INTER_HOP_LATENCY_S))


def test_projection_dict_validates():
    d = _projection().to_dict()
    assert kind_of(d) == "projection"
    validate(d)
    assert [r["n_gpus"] for r in d["rows"]] == [2**k for k in range(1, 11)]
    effs = [r["ddp_efficiency"] for r in d["rows"]]
    # more GPUs are never more efficient
    assert all(a >= b for a, b in zip(effs, effs[1:], strict=False))
    d["rows"][0]["ddp_efficiency"] = 1.5
    with pytest.raises(SchemaError, match="rows/0/ddp_efficiency"):
        validate(d)


def test_projection_renders(capsys):
    from gobrrr.show.dist_figures import projection_svg
    from gobrrr.show.terminal import print_projection

    p = _projection()
    print_projection(p)
    out = capsys.readouterr().out
    assert "1024" in out and "DDP" in out and "At 64 GPUs" in out
    assert "inter-node bandwidth" in out  # the assumptions and sensitivity are printed
    svg = projection_svg(p.to_dict())
    assert svg.startswith("<svg") and "scaling efficiency" in svg
    assert "overlap" in svg  # the assumptions are written next to the plot
    assert not math.isnan(p.row(64).ddp_efficiency)
