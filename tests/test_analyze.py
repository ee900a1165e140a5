"""`gobrrr analyze`: the doctor Report of a torch.profiler trace recorded elsewhere.

The traces under tests/data/traces were recorded on an NVIDIA H200 (torch 2.11,
benchmarks/record_traces.py, two profiled steps each but the GPT-2 training step's one);
their kernel counts and kernel times are the ones tests/test_tracefile.py counted from the
raw JSON. No calibration of an H200 is cached here (conftest isolates the cache) unless a
test asks for the H200's (the h200_calibration fixture), so their ceilings are the
datasheet's. The attention and GPT-2 training-step traces: tests/test_analyze_h200.py.
CPU traces are recorded in the tests, of the built-in examples whose regime `gobrrr doctor`
is tested to give (tests/test_diagnose.py: examples.<name>.expected_regime).
"""

import gzip
import json
import warnings
from pathlib import Path

import pytest
import torch
from click.testing import CliRunner
from torch.profiler import ProfilerActivity, profile, schedule

from gobrrr import examples
from gobrrr.analyze import analyze
from gobrrr.cli import cli
from gobrrr.errors import UserError
from gobrrr.schema import validate
from gobrrr.tracefile.columns import RecordedArgs, stream_trace
from gobrrr.tracefile.opcount import count_recorded, decomposes

DATA = Path(__file__).parent / "data" / "traces"
US = 1e-6


def raw_events(name):
    return json.loads(gzip.decompress((DATA / name).read_bytes()))["traceEvents"]


def spans_us(events):
    """Each ProfilerStep's span by the rule analyze documents, counted here from the raw
    events: first recorded event in the step to the later of its last event (clipped to
    the step) and the end of the last kernel its ops launched."""
    steps = [e for e in events if e.get("cat") == "user_annotation"
             and e["name"].startswith("ProfilerStep#")]
    cpu = [e for e in events if e.get("ph") == "X" and e.get("cat") in
           ("cpu_op", "user_annotation", "cuda_runtime") and e not in steps]
    ext_ts = {e["args"]["External id"]: e["ts"] for e in cpu if e.get("cat") == "cpu_op"}
    out = []
    for s in steps:
        lo, hi = s["ts"], s["ts"] + s["dur"]
        inside = [e for e in cpu if lo <= e["ts"] <= hi]
        ends = [min(e["ts"] + e["dur"], hi) for e in inside]
        ends += [k["ts"] + k["dur"] for k in events if k.get("cat") == "kernel"
                 and lo <= ext_ts[k["args"]["External id"]] <= hi]
        out.append(max(ends) - min(e["ts"] for e in inside))
    return out


def test_mlp_batch1_forward_is_overhead_bound_like_doctor_on_the_h200():
    r = analyze([DATA / "mlp_b1_forward.json.gz"])
    # gobrrr doctor examples:mlp --device cuda on the H200: overhead 0.85
    # (benchmarks/results/h200/doctor-mlp.json). The trace's CPU side ran under the
    # profiler, so its overhead share is higher still.
    assert r.regime == "overhead" and r.fractions["overhead"] > 0.85
    b = r.budget
    # 8 kernels per step (4 GEMV + 4 GELU); kernel time 17.632 and 17.536 us per step.
    assert r.workload["trace"]["kernels_per_step"] == 8 and len(b.kernels) == 8
    assert b.busy_s == pytest.approx((17.632 + 17.536) / 2 * US, abs=1e-12)
    assert b.wall_s == pytest.approx(sum(spans_us(raw_events("mlp_b1_forward.json.gz")))
                                     / 2 * US, abs=1e-11)
    assert b.overhead_s == pytest.approx(b.wall_s - b.busy_s, rel=1e-6)
    addmm = [c for c in r.counts.records if c.op == "aten::addmm"]
    # [1, 512] @ [512, 512]: 2 * 512 * 512 FLOPs; reads bias, input, weight, writes output.
    assert [c.flops for c in addmm] == [2 * 512 * 512] * 4
    assert addmm[0].bytes == 4 * (512 + 512 + 512 * 512 + 512)
    assert r.counts.uncounted_ops == []
    assert r.timing.n_samples == 2 and r.workload["trace"]["steps"] == 2
    assert r.ceilings.source == "datasheet"
    assert any("datasheet peaks of the NVIDIA H200" in n for n in r.notes)


def test_gpt2_forward_is_compute_bound_like_doctor_on_the_h200():
    # GPT-2 small (transformers' config, random weights), 8 x 512 tokens, inference under
    # no_grad, sdpa attention (benchmarks/record_traces.py gpt2_forward). The same
    # workload under `gobrrr doctor hf:gpt2 --batch-size 8 --seq-len 512 --device cuda`
    # on the H200 the same day: compute 0.833, memory 0.113, overhead 0.054, T_wall
    # 28.9 ms (benchmarks/results/h200/gpu-final-2026-11-30.log). Datasheet ceilings
    # here (no calibration cached), doctor's measured: a 10-point margin for that.
    r = analyze([DATA / "gpt2_forward.json.gz"])
    assert r.regime == "compute"
    assert r.fractions["compute"] == pytest.approx(0.833, abs=0.10)
    assert r.fractions["overhead"] == pytest.approx(0.054, abs=0.10)
    events = raw_events("gpt2_forward.json.gz")
    # 235 kernels and 24 memsets (two per layer) per step: device activity alike.
    kernels = [e for e in events if e.get("cat") in ("kernel", "gpu_memset")]
    assert r.workload["trace"]["kernels_per_step"] == len(kernels) / 2 == 259
    assert r.budget.busy_s == pytest.approx(sum(k["dur"] for k in kernels) / 2 * US,
                                            rel=1e-9)
    flops = {}
    for rec in r.counts.records:
        flops[rec.op] = flops.get(rec.op, 0) + rec.flops
    t, layers = 8 * 512, 12
    # Per layer: qkv 768->2304, attention out 768->768, MLP 768->3072->768 (addmm);
    # the LM head 768->50257 (mm, tied weights, no bias): 2 * tokens * in * out each.
    assert flops["aten::addmm"] == layers * 2 * t * 768 * (2304 + 768 + 3072 * 2)
    assert flops["aten::mm"] == 2 * t * 768 * 50257
    # SDPA: QK^T and PV, 2 * B * H * S * S * D each, causal mask not discounted.
    assert flops["aten::_scaled_dot_product_efficient_attention"] == (
        layers * 2 * (2 * 8 * 12 * 512 * 512 * 64))
    assert r.counts.uncounted_ops == []


def test_pointwise_chain_is_memory_bound():
    r = analyze([DATA / "pointwise_chain.json.gz"])
    assert r.regime == "memory", r.fractions
    b = r.budget
    assert r.workload["trace"]["kernels_per_step"] == 4
    assert b.busy_s == pytest.approx(266.719 / 2 * US, abs=1e-12)
    assert b.wall_s == pytest.approx(sum(spans_us(raw_events("pointwise_chain.json.gz")))
                                     / 2 * US, abs=1e-11)
    # ((x * 2).sin() + 1).relu() on 2^24 fp32: each op 1 FLOP per element, reads and
    # writes 2^24 * 4 bytes (mul and add also read their 0-dim long operand: 8 bytes).
    n = 2**24
    assert [(c.op, c.flops, c.bytes) for c in r.counts.records] == [
        ("aten::mul", n, 8 * n + 8), ("aten::sin", n, 8 * n), ("aten::add", n, 8 * n + 8),
        ("aten::relu", n, 8 * n)]
    # aten::relu's kernel is launched by the aten::clamp_min inside it: relu's time.
    assert all(r.budget.per_call[i].time_s > 0 for i in range(4))


def test_training_step_every_kernel_lands_on_a_counted_op():
    r = analyze([DATA / "mlp_train_step.json.gz"])
    assert r.regime == "overhead", r.fractions
    b = r.budget
    assert r.workload["trace"]["kernels_per_step"] == 42
    assert b.busy_s == pytest.approx(367.876 / 2 * US, abs=1e-12)
    assert sum(k.duration_s for k in b.kernels) == pytest.approx(b.busy_s, rel=1e-9)
    assert all(k.op_index is not None for k in b.kernels)  # none unattributed
    by_op = {row.name: row for row in b.per_op}
    assert by_op["aten::addmm"].calls == 4 and by_op["aten::mm"].calls == 7
    # fp32 [64, 512] @ [512, 512]: 2 * 64 * 512 * 512 FLOPs per forward addmm.
    assert by_op["aten::addmm"].flops == 4 * 2 * 64 * 512 * 512
    phases = {c.phase for c in r.counts.records}
    assert phases == {"forward", "backward", "optimizer"}
    assert {"optimizer.Adam", "backward", "Global"} <= {m.name for m in b.per_module}
    # A CUTLASS SGEMM plus a split-K reduction per forward addmm: the GEMM is compute,
    # the reduction memory (as doctor splits a matmul's kernels).
    regimes = {k.regime for k in b.kernels if k.op_index == by_op_index(r, "aten::addmm")}
    assert regimes == {"compute", "memory"}


def by_op_index(r, op):
    return next(c.index for c in r.counts.records if c.op == op)


def test_a_calibration_of_the_same_gpu_is_used(h200_calibration):
    cal = h200_calibration
    r = analyze([DATA / "pointwise_chain.json.gz"])
    assert r.ceilings.source == "cache"
    assert r.ceilings.bandwidth_bytes_per_s == cal["bandwidth_bytes_per_s"]
    assert any("this machine's calibration of the NVIDIA H200" in n for n in r.notes)
    assert r.regime == "memory"


def test_json_validates_and_html_renders(tmp_path):
    html = tmp_path / "r.html"
    res = CliRunner().invoke(cli, ["analyze", str(DATA / "mlp_train_step.json.gz"),
                                   "--json", "-q", "--html", str(html)])
    assert res.exit_code == 0, res.output
    d = json.loads(res.stdout)
    validate(d, "report")
    assert d["workload"]["source"] == "trace" and d["workload"]["trace"]["steps"] == 2
    assert d["machine"]["source"] == "datasheet"
    assert "gobrrr analyze: mlp_train_step.json.gz" in html.read_text()


def test_terminal_report():
    res = CliRunner().invoke(cli, ["analyze", str(DATA / "mlp_b1_forward.json.gz"), "-q"])
    assert res.exit_code == 0, res.output
    assert "gobrrr analyze" in res.stdout and "OVERHEAD-BOUND" in res.stdout
    assert "per step" in res.stdout


# ---------------------------------------------------------------- traces recorded here


@pytest.fixture(scope="module")
def cpu_ceilings(calibrated_cache):
    """This CPU's ceilings, measured once for the session (conftest's calibration, read
    from a copy of its cache)."""
    from gobrrr.hardware import calibrate

    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("XDG_CACHE_HOME", str(calibrated_cache))
        return calibrate("cpu")


def record(path, fn, args, *, steps=4, shapes=True, with_schedule=True):
    """A raw torch.profiler trace of `fn(*args)`, as a user would record it."""
    for _ in range(2):
        fn(*args)
    sched = schedule(wait=0, warmup=1, active=steps) if with_schedule else None
    warnings.filterwarnings("ignore", message=".*Profiler clears events.*")
    with profile(activities=[ProfilerActivity.CPU], record_shapes=shapes, schedule=sched,
                 on_trace_ready=(lambda p: p.export_chrome_trace(str(path)))
                 if with_schedule else None) as prof:
        for _ in range(steps + 1):
            fn(*args)
            prof.step()
    if not with_schedule:
        prof.export_chrome_trace(str(path))
    return path


def test_a_cpu_traces_ops_lose_an_empty_ops_recorded_duration(tmp_path, monkeypatch):
    # 64 adds on 16 elements: each op's work takes nanoseconds, its dispatch microseconds.
    # Before analyze took an empty op's recorded duration off each op (cpu_dispatch.py)
    # it read this trace memory 0.67 where doctor said overhead 0.84 (this 2-core CPU,
    # quiet; 0.92-0.97 after). Regimes move with load here (one such run beside a CPU hog
    # read memory 0.80), so this checks the correction on one recorded trace, read twice.
    from gobrrr.tracefile import analysis

    def chain(x):
        for _ in range(64):
            x = x + 1.0
        return x

    path = record(tmp_path / "chain.json", chain, (torch.ones(16),))
    monkeypatch.setattr(analysis, "empty_op_us", lambda: 0.0)
    plain = analyze([path])
    monkeypatch.setattr(analysis, "empty_op_us", lambda: 2.0)
    fixed = analyze([path])
    assert fixed.budget.wall_s == plain.budget.wall_s
    # 64 op events a step, each 2 us shorter (none recorded under 2 us: clamped at 0)
    assert plain.budget.busy_s - fixed.budget.busy_s == pytest.approx(
        64 * 2e-6, rel=0.05)
    assert fixed.fractions["overhead"] > plain.fractions["overhead"]
    assert " less 2.00 us, an empty op's recorded duration on this CPU" in fixed.notes[0]


@pytest.mark.serial
@pytest.mark.parametrize("name", ["mlp", "matmul"])
def test_cpu_trace_gives_the_regime_doctor_gives(name, tmp_path, cpu_ceilings):
    ex = examples.get(name)
    fn, args = ex.factory(ex.default_batch("cpu"), "cpu")
    r = analyze([record(tmp_path / f"{name}.json", fn, args)], ceilings=cpu_ceilings)
    assert r.regime == ex.expected_regime, r.fractions
    assert r.workload["device"] == "cpu" and r.workload["trace"]["steps"] == 4
    assert r.notes[0].startswith("the trace has no device activity: analysed on its CPU")
    assert r.budget.busy_s > 0 and r.budget.kernels == []


def test_cpu_trace_without_steps_or_shapes(tmp_path, cpu_ceilings):
    a, b = torch.randn(256, 256), torch.randn(256, 256)
    path = record(tmp_path / "t.json", torch.mm, (a, b), shapes=False, with_schedule=False)
    r = analyze([path], ceilings=cpu_ceilings)
    # No step ranges: the 5 profiled calls of one op are 5 steps by the repeated-calls
    # rule (stepfind.py), 4 when the first is slow enough to be called a warm-up.
    assert r.workload["trace"]["steps"] in (4, 5)
    assert any(n.startswith("steps: the trace has no ProfilerStep# ranges; 5 of the 5 "
                            "top-level events of its main thread are one sequence of 1 "
                            "(aten::mm) repeated 5 times") for n in r.notes), r.notes
    assert any("no recorded shapes" in n for n in r.notes)
    mms = [c for c in r.counts.records if c.op == "aten::mm"]
    assert len(mms) == 1  # the averaged step's one call
    # By its name (no shapes, so no roofline): a matmul's time is compute.
    assert all(c.flops == 0 and c.regime_hint == "compute" for c in mms)
    assert r.budget.compute_s > 0


# ---------------------------------------------------------------- synthetic traces


def write_trace(path, events, **meta):
    doc = {"schemaVersion": 1,
           "deviceProperties": [{"id": 0, "name": "NVIDIA H200", "computeMajor": 9,
                                 "computeMinor": 0}],
           "record_shapes": 1, **meta, "traceEvents": events}
    path.write_text(json.dumps(doc))
    return path


def x(cat, name, ts, dur, **args):
    return {"ph": "X", "cat": cat, "name": name, "pid": 1, "tid": 1, "ts": ts, "dur": dur,
            "args": args}


def pointwise(name, ts, ext):
    return x("cpu_op", name, ts, 5, **{"External id": ext, "Input Dims": [[1024], [1024]],
                                        "Input type": ["float", "float"],
                                        "Concrete Inputs": ["", ""]})


def test_overlapping_streams_count_once_and_correlation_links(tmp_path):
    # Two ops, each launching one 40 us kernel, on two streams overlapping by 20 us; the
    # second kernel carries no External id: its launch call's correlation finds its op.
    events = [
        x("user_annotation", "ProfilerStep#7", 0, 100),
        pointwise("aten::mul", 10, 1),
        x("cuda_runtime", "cudaLaunchKernel", 12, 2, **{"External id": 1, "correlation": 11}),
        pointwise("aten::add", 30, 2),
        x("cuda_runtime", "cudaLaunchKernel", 31, 2, correlation=12),
        {**x("kernel", "k_mul", 20, 40, **{"External id": 1, "correlation": 11,
                                            "stream": 7}), "pid": 0},
        {**x("kernel", "k_add", 40, 40, correlation=12, stream=8), "pid": 0},
    ]
    r = analyze([write_trace(tmp_path / "t.json", events)])
    b = r.budget
    # Span: first event (10) to the last kernel's end (80); busy: [20, 80] = 60 us.
    assert b.wall_s == pytest.approx(70 * US) and b.busy_s == pytest.approx(60 * US)
    assert b.overhead_s == pytest.approx(10 * US)
    # Both ops got kernel time, scaled by 60/80 so they add up to the busy time.
    times = {c.op: c.time_s for c in b.per_call}
    assert times == {"aten::mul": pytest.approx(30 * US), "aten::add": pytest.approx(30 * US)}
    assert any("overlapped" in n for n in r.notes)
    assert r.workload["trace"]["steps"] == 1


def test_recorded_shapes_count_like_a_live_run():
    # aten::mm [64, 32] @ [32, 16] rebuilt on meta tensors: test_counting's numbers.
    c = count_recorded("aten::mm", RecordedArgs([[64, 32], [32, 16]], ["float", "float"],
                                                [[32, 1], [16, 1]], ["", ""]))
    assert (c.flops, c.bytes, c.op_class, c.method) == (65536, 4 * (2048 + 512 + 1024),
                                                        "matmul", "meta")
    # A broadcast (stride 0) input counts its distinct elements once.
    c = count_recorded("aten::add", RecordedArgs([[8, 4], [8, 4], []],
                                                 ["float", "float", "Scalar"],
                                                 [[4, 1], [0, 1], []], ["", "", "1"]))
    assert c.bytes == 4 * (32 + 4 + 32) and c.flops == 32
    # Not an aten op: its recorded inputs' bytes, no formula.
    c = count_recorded("mylib::op", RecordedArgs([[10]], ["float"], None, [""]))
    assert (c.bytes, c.has_formula, c.method) == (40, False, "shapes")
    assert decomposes("aten::linear", RecordedArgs([[1, 4], [4, 4], [4]], ["float"] * 3,
                                                   None, [""] * 3))
    assert not decomposes("aten::addmm", None)


def test_streamed_columns_match_the_whole_file():
    # the events as the raw JSON has them, loaded whole and filtered by category
    import gzip

    raw = json.loads(gzip.open(DATA / "mlp_train_step.json.gz", "rt").read())["traceEvents"]
    x = [e for e in raw if isinstance(e, dict) and e.get("ph") == "X"]
    kernels = [e for e in x if e.get("cat") == "kernel"]
    ops = [e for e in x if e.get("cat") == "cpu_op"]
    steps = [e for e in x if e.get("cat") == "user_annotation"
             and str(e.get("name", "")).startswith("ProfilerStep#")]
    cols = stream_trace(DATA / "mlp_train_step.json.gz")
    assert len(cols.device["ts_us"]) == len(kernels) == 84
    assert len(cols.steps) == len(steps) == 2
    assert len(cols.cpu["ts_us"]) == len(ops) + 4  # + Optimizer ranges
    assert cols.device["dur_us"].sum() == pytest.approx(367.876, abs=1e-6)


# ---------------------------------------------------------------- bad input


def error_lines(result):
    return [x for x in result.stderr.splitlines() if x.startswith("gobrrr: error")]


def run_bad(*paths):
    r = CliRunner().invoke(cli, ["analyze", *map(str, paths), "-q"])
    assert r.exit_code == 2, r.output
    assert "Traceback" not in r.stderr
    lines = error_lines(r)
    assert len(lines) == 1, r.stderr
    return lines[0]


def dist(path, rank, world):
    return write_trace(path, [x("cpu_op", "aten::mm", 0, 1)],
                       distributedInfo={"backend": "nccl", "rank": rank,
                                        "world_size": world})


def test_bad_inputs_are_one_line(tmp_path):
    good = DATA / "pointwise_chain.json.gz"
    assert "no such file" in run_bad(tmp_path / "missing.json")
    (tmp_path / "x.json").write_text("not json at all")
    assert "is not JSON" in run_bad(tmp_path / "x.json")
    (tmp_path / "y.json").write_text('{"a": 1}')
    assert "not a torch.profiler trace" in run_bad(tmp_path / "y.json")
    (tmp_path / "list.json").write_text("[1, 2]")
    assert "not a torch.profiler trace" in run_bad(tmp_path / "list.json")
    # A Chrome trace, but not torch.profiler's: no op or kernel events.
    write_trace(tmp_path / "z.json", [{"ph": "X", "cat": "op,memory", "name": "a",
                                       "ts": 0, "dur": 1}])
    assert "not a torch.profiler trace" in run_bad(tmp_path / "z.json")
    whole = good.read_bytes()
    (tmp_path / "cut.json.gz").write_bytes(whole[: len(whole) // 2])
    assert "cannot read it" in run_bad(tmp_path / "cut.json.gz")
    text = gzip.decompress(whole)
    (tmp_path / "cut.json").write_bytes(text[: len(text) // 2])
    assert "ends early" in run_bad(tmp_path / "cut.json")
    assert "is a directory" in run_bad(tmp_path)
    # Several traces: only as ranks of one job (merged: tests/test_analyze_ranks.py).
    assert "has no distributedInfo" in run_bad(good, good)
    r0, r1 = dist(tmp_path / "r0.json", 0, 2), dist(tmp_path / "r1.json", 1, 2)
    assert "two are rank 0" in run_bad(r0, dist(tmp_path / "r0b.json", 0, 2))
    assert "two are rank 0" in run_bad(r0, r0)
    assert "different world sizes" in run_bad(r0, dist(tmp_path / "w4.json", 1, 4))
    assert "do not fit a world size of 2" in run_bad(r0, dist(tmp_path / "r2.json", 2, 2))
    # Ranks of one job with no ProfilerStep# ranges: their steps are found (stepfind.py),
    # and with no collective in them the merged report says so rather than refusing.
    merged = analyze([r0, r1], ceilings=None)
    assert merged.distributed is not None
    assert any(n.startswith("no collective was found on every rank")
               for n in merged.distributed.to_dict()["notes"])


def test_unknown_gpu_without_ceilings_is_one_line(tmp_path):
    events = raw_events("pointwise_chain.json.gz")
    path = write_trace(tmp_path / "t.json", events)
    doc = json.loads(path.read_text())
    doc["deviceProperties"][0]["name"] = "Mystery Accelerator 9000"
    path.write_text(json.dumps(doc))
    with pytest.raises(UserError, match="no ceilings for the trace's GPU"):
        analyze([path])


def test_pure_python_parser_is_used_with_a_note_when_the_c_backend_is_missing(monkeypatch):
    import ijson

    from gobrrr.tracefile import read as tracefile

    def python_backend():
        return ijson.get_backend("python"), "pure-Python backend (test)"

    monkeypatch.setattr(tracefile, "ijson_backend", python_backend)
    monkeypatch.setattr("gobrrr.tracefile.columns.ijson_backend", python_backend)
    r = analyze([DATA / "mlp_b1_forward.json.gz"])
    assert "pure-Python backend (test)" in r.notes
    assert r.budget.busy_s == pytest.approx((17.632 + 17.536) / 2 * US, abs=1e-12)


def test_ijson_is_imported_only_by_analyze():
    import subprocess
    import sys

    code = "import sys, gobrrr, gobrrr.cli, gobrrr.tracefile; print('ijson' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.stdout.strip() == "False", out.stderr


def test_analyze_without_ijson_is_one_line(monkeypatch):
    # gobrrr run from a source tree (PYTHONPATH=src) where ijson was never installed, as
    # on the GPU machine: one line and exit 2, not a traceback.
    monkeypatch.setitem(__import__("sys").modules, "ijson", None)  # import raises
    res = CliRunner().invoke(cli, ["analyze", str(DATA / "mlp_b1_forward.json.gz")])
    assert res.exit_code == 2, res.output
    assert res.output.strip().splitlines()[-1] == (
        "gobrrr: error: gobrrr analyze needs ijson, which is not installed here: "
        "pip install 'ijson>=3.1' (a dependency of gobrrr)")


def _one_trace(tmp_path, edit):
    """The pointwise-chain trace with `edit` applied to its events (a list)."""
    doc = json.loads(gzip.open(DATA / "pointwise_chain.json.gz", "rt").read())
    edit(doc["traceEvents"])
    path = tmp_path / "edited.json"
    path.write_text(json.dumps(doc))
    return path


@pytest.mark.parametrize("field,value", [("args", "oops"), ("cat", {}), ("pid", [1]),
                                         ("dur", -5.0), ("ts", "soon")])
def test_a_malformed_event_is_left_out_with_a_note(tmp_path, field, value):
    # issue 28: one malformed field in one event crashed the reader (traceback, exit 1);
    # a negative duration gave "OVERHEAD-BOUND: 21267%" and a report its own schema
    # refuses
    from gobrrr.schema import validate

    def edit(events):
        op = next(e for e in events if e.get("cat") == "cpu_op")
        op[field] = value

    r = analyze([_one_trace(tmp_path, edit)]).to_dict()
    validate(r, "report")
    assert any("1 malformed event(s) left out" in n for n in r["notes"]), r["notes"]
    assert sum(r["fractions"].values()) == pytest.approx(1.0)
    assert all(0 <= f <= 1 for f in r["fractions"].values())


def test_a_malformed_recorded_shape_is_no_shape(tmp_path):
    def edit(events):
        for e in events:
            if e.get("cat") == "cpu_op" and "Input type" in e.get("args", {}):
                e["args"]["Input type"] = 7
                e["args"]["Input Strides"] = 5

    r = analyze([_one_trace(tmp_path, edit)])
    assert r.budget.wall_s > 0  # read, the ops counted as recorded without shapes


def test_an_integer_beyond_int64_is_named(tmp_path):
    # issue 28: an External id of 10^30 was called "not JSON" (ijson's C parser stops on
    # it: "integer overflow"); a number past 64 bits is no profiler's
    def edit(events):
        next(e for e in events if e.get("cat") == "cpu_op")["args"]["External id"] = 10**30

    with pytest.raises(UserError, match="holds an integer beyond 64 bits"):
        analyze([_one_trace(tmp_path, edit)])


def test_a_closure_inside_the_optimizer_step_is_forward_and_backward(tmp_path,
                                                                     cpu_ceilings):
    # Lightning's automatic optimization (and LBFGS) run the forward and backward in a
    # closure inside optimizer.step(): its range holds them. The closure's ops are read
    # as forward and backward, the update alone as the optimizer's.
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(32, 32), torch.nn.ReLU(),
                                torch.nn.Linear(32, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x = torch.randn(8, 32)

    def closure():
        opt.zero_grad()
        loss = model(x).square().mean()
        loss.backward()
        return loss

    r = analyze([record(tmp_path / "closure.json", lambda: opt.step(closure), ())],
                ceilings=cpu_ceilings)
    by_phase = {}
    for c in r.counts.records:
        by_phase.setdefault(c.phase, set()).add(c.op)
    assert {"aten::addmm", "aten::relu"} <= by_phase["forward"]
    assert "aten::addmm" not in by_phase["optimizer"] and "aten::relu" not in \
        by_phase["optimizer"]
    assert by_phase["backward"]
    # SGD's own update stays the optimizer's (foreach or per-parameter add_)
    assert by_phase["optimizer"] & {"aten::add_", "aten::_foreach_add_"}


def test_prefill_and_decode_ranges_in_a_users_loop_are_the_phases(tmp_path, cpu_ceilings):
    # issue 21: a decode loop that marks its phases with record_function is read per
    # phase by analyze, as doctor would name them
    from torch.profiler import record_function

    torch.manual_seed(0)
    emb, head = torch.nn.Embedding(64, 32), torch.nn.Linear(32, 64)
    ids = torch.randint(0, 64, (2, 16))

    @torch.inference_mode()
    def generate():
        with record_function("prefill"):
            tok = head(emb(ids)).softmax(-1)[:, -1:].argmax(-1)
        for _ in range(4):
            with record_function("decode"):
                tok = head(emb(tok)).softmax(-1).argmax(-1)

    r = analyze([record(tmp_path / "gen.json", generate, ())], ceilings=cpu_ceilings)
    by_phase = {}
    for c in r.counts.records:
        by_phase.setdefault(c.phase, []).append(c.op)
    assert set(by_phase) == {"prefill", "decode"}, by_phase
    assert by_phase["prefill"].count("aten::embedding") == 1
    assert by_phase["decode"].count("aten::embedding") == 4
    assert {row.name for row in r.budget.per_phase} == {"prefill", "decode"}


def test_found_steps_count_from_the_completion_of_the_call_before(tmp_path):
    # Four calls of one op, each launching a 300 us kernel on one stream, launched every
    # 20 us after a first call whose host side took 100 us (a warm-up by its window:
    # 100 > 1.5 x 20, left out). The GPU runs the kernels back to back: [10, 310],
    # [310, 610], [610, 910], [910, 1210]. Each kept call completes 300 us after the one
    # before it, so T_wall = busy = 300 us and the first call's kernel stays out. Counted
    # from each call's first host event instead, the steps would span [100, 1210]:
    # 370 us per step, 210 us of it the warm-up's kernel, as memory of no op.
    events = []
    for j, t0 in enumerate((0, 100, 120, 140)):
        events += [pointwise("aten::mul", t0, j + 1),
                   x("cuda_runtime", "cudaLaunchKernel", t0 + 1, 2,
                     **{"External id": j + 1, "correlation": 100 + j}),
                   {**x("kernel", "k_mul", 10 + 300 * j, 300,
                        **{"External id": j + 1, "correlation": 100 + j, "stream": 7}),
                    "pid": 0}]
    r = analyze([write_trace(tmp_path / "t.json", events)])
    b = r.budget
    assert r.workload["trace"]["steps"] == 3
    assert b.wall_s == pytest.approx(300 * US) and b.busy_s == pytest.approx(300 * US)
    assert b.overhead_s == pytest.approx(0.0, abs=1e-12)
    assert [c.time_s for c in b.per_call] == [pytest.approx(300 * US)]
    assert b.compute_s_by_unit.get("unlinked", 0.0) == 0.0
    assert "1 kernel(s) (300.0 us) ran outside the profiled steps: not counted" in r.notes
