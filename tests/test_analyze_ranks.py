"""`gobrrr analyze RANK0 RANK1`: the ranks of one job merged into one Report
(gobrrr.dist.analyze). Traces of a 2-rank gloo DDP job recorded here under torchrun;
the H200 x2 NCCL traces of tests/data/dist (trimmed: device work, DDP's reducer ranges,
their launches, no aten ops) for the communication pass; hand-made traces for the
exact arithmetic of taking communication out of the per-op budget."""

import gzip
import io
import json
import os
import subprocess
import sys
from contextlib import redirect_stdout
from pathlib import Path

import pytest
from click.testing import CliRunner

from gobrrr.analyze import analyze, check_traces
from gobrrr.cli import cli
from gobrrr.dist.analyze import FROM_TRACES_NOTE, rank_comm, without_communication
from gobrrr.dist.comm import WINDOW
from gobrrr.dist.commread import read_trace
from gobrrr.errors import UserError
from gobrrr.hardware import Ceilings
from gobrrr.phases import is_collective
from gobrrr.schema import validate
from gobrrr.tracefile.columns import stream_trace
from gobrrr.tracefile.steps import analyse_steps

DIST = Path(__file__).parent / "data" / "dist"

# A tiny DDP training step under a profiler schedule (ProfilerStep#2..4: 3 steps), each
# rank exporting rank{N}.json. bucket_cap_mb=0.25 (262144 B) splits the gradients into two
# buckets, filled in backward order: [w2 (256x512), b2 (256)] then [w1 (512x256), b1 (512)].
RECORD = """
import os
import sys
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.profiler import ProfilerActivity, profile, schedule

out = sys.argv[1]
dist.init_process_group("gloo")
rank = dist.get_rank()
torch.manual_seed(0)
model = DDP(torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.ReLU(),
                                torch.nn.Linear(512, 256)), bucket_cap_mb=0.25)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
x = torch.randn(64, 256)


def step():
    opt.zero_grad()
    model(x).sum().backward()
    opt.step()


def save(p):
    p.export_chrome_trace(f"{out}/rank{rank}.json")


with profile(activities=[ProfilerActivity.CPU], record_shapes=True,
             schedule=schedule(wait=1, warmup=1, active=3), on_trace_ready=save) as prof:
    for _ in range(5):
        step()
        prof.step()
dist.destroy_process_group()
# Both traces are written: leave without the interpreter's teardown, where a torch thread
# still joinable once aborted rank 0 (std::terminate, SIGABRT) in a CI simulation
os._exit(0)
"""


def ceilings() -> Ceilings:
    # Hand-made, so the test pays for no calibration (as tests/test_lab.py).
    import platform

    import torch

    return Ceilings(device="cpu", fingerprint={"device": "cpu", "name": "test",
                                               "torch": torch.__version__,
                                               "python": platform.python_version()},
                    peak_flops_per_s={"fp32": 1e11, "bf16": 2e11},
                    bandwidth_bytes_per_s=5e10, op_overhead_s=2e-6, python_ops_per_s=5e7,
                    measured_at="test", calibrate_s=0.0)


def record_ranks(script: str, out: Path, timeout_s: float = 120) -> tuple[Path, Path]:
    """Run `script` on 2 gloo ranks under torchrun (one thread each); their traces."""
    (out / "record.py").write_text(script)
    r = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone",
                        "--nproc-per-node", "2", str(out / "record.py"), str(out)],
                       capture_output=True, text=True, timeout=timeout_s,
                       env=os.environ | {"OMP_NUM_THREADS": "1"})
    assert r.returncode == 0, r.stderr[-3000:]
    return out / "rank0.json", out / "rank1.json"


@pytest.fixture(scope="module")
def gloo_ranks(tmp_path_factory):
    return record_ranks(RECORD, tmp_path_factory.mktemp("ranks"))


def test_gloo_ranks_merge_into_one_report(gloo_ranks):
    report = analyze(list(gloo_ranks), ceilings=ceilings())
    d = report.to_dict()
    validate(d, "report")
    dd = d["distributed"]
    assert (dd["world_size"], dd["backend"], dd["device"]) == (2, "gloo", "cpu")
    assert [r["rank"] for r in dd["ranks"]] == [0, 1]
    assert d["workload"]["trace"]["files"] == ["rank0.json", "rank1.json"]
    assert d["workload"]["trace"]["steps"] == 3
    for r in dd["ranks"]:
        assert set(r["fractions"]) == {"overhead", "memory", "compute", "communication"}
        assert sum(r["fractions"].values()) == pytest.approx(1.0)
        # every step waits for both all-reduces: some of it nothing hides
        assert r["fractions"]["communication"] > 0
        assert r["waiting_source"] == "profiled steps"
        assert r["collectives"] == 6  # 2 buckets x 3 steps
    fr = d["budget"]["fractions"]
    assert set(fr) == {"overhead", "memory", "compute", "communication"}
    assert sum(fr.values()) == pytest.approx(1.0)
    # rank 0's budget is the report's
    assert fr == pytest.approx(dd["ranks"][0]["fractions"])
    # two buckets, one all-reduce each per step, fp32:
    # (256*512 + 256) * 4 = 525312 B and (512*256 + 512) * 4 = 526336 B
    sizes = sorted((c["collective"], c["bytes"], c["calls_per_step"])
                   for c in dd["collectives"])
    assert sizes == [("all_reduce", 525312, 1.0), ("all_reduce", 526336, 1.0)]
    assert all(c["busbw_gbps"] > 0 for c in dd["collectives"])
    assert FROM_TRACES_NOTE in dd["notes"]
    # the collective ops are communication, not counted ops of the per-op budget
    assert not [r for r in report.counts.records if is_collective(r.op)]
    assert any(r.op == "aten::mm" for r in report.counts.records)
    # it renders: terminal (the ranks table) and HTML (the distributed section)
    from gobrrr.show import save_html
    from gobrrr.show.terminal import print_report

    buf = io.StringIO()
    with redirect_stdout(buf):
        print_report(report.to_dict())
    assert "ranks (2, gloo)" in buf.getvalue()
    assert "COMMUNICATION" in buf.getvalue() or "communication" in buf.getvalue()
    path = gloo_ranks[0].parent / "r.html"
    save_html(report, path)
    html = path.read_text()
    assert "rank0.json" in html and "all_reduce" in html


def test_a_given_step_is_every_ranks_t_wall(gloo_ranks):
    # `analyze --step-ms` on a job's ranks: the job's unprofiled step is each rank's T_wall
    # (its ranks step together); each rank's ops keep the trace's times, and on CPU its
    # communication is its share of the traced window times T_wall (accounting.py), so
    # it scales with the given step; overhead is the rest
    traced = analyze(list(gloo_ranks), ceilings=ceilings()).to_dict()["distributed"]
    step_s = 2 * max(r["wall_s"] for r in traced["ranks"])
    d = analyze(list(gloo_ranks), ceilings=ceilings(), step_s=step_s).to_dict()
    assert d["budget"]["wall_s"] == step_s
    assert d["workload"]["trace"]["step_given_s"] == step_s
    for before, r in zip(traced["ranks"], d["distributed"]["ranks"], strict=True):
        assert r["wall_s"] == step_s
        assert sum(r["fractions"].values()) == pytest.approx(1.0)
        for part in ("compute", "memory"):
            assert r["seconds"][part] == pytest.approx(before["seconds"][part])
        assert r["seconds"]["communication"] == pytest.approx(
            before["seconds"]["communication"] * step_s / before["wall_s"])
        assert sum(r["seconds"].values()) == pytest.approx(step_s)


def test_each_rank_trace_is_streamed_once(gloo_ranks, monkeypatch):
    # The communication pass reads the columns the per-op pass streamed: one pass over
    # each file, and no json.load of a whole trace (ranks' traces can be gigabytes).
    import gobrrr.dist.analyze as da
    import gobrrr.tracefile.columns as ts

    streamed = []
    real = ts.stream_trace
    for module in (ts, da):  # wherever it is called from
        monkeypatch.setattr(module, "stream_trace", lambda p: streamed.append(p) or real(p))
    monkeypatch.setattr(json, "load", lambda *a, **k: pytest.fail("a trace read whole"))
    d = analyze(list(gloo_ranks), ceilings=ceilings()).to_dict()
    assert sorted(p.name for p in streamed) == ["rank0.json", "rank1.json"]
    assert [r["collectives"] for r in d["distributed"]["ranks"]] == [6, 6]


def test_gloo_ranks_bad_pairs_are_one_line(gloo_ranks, tmp_path):
    r0, r1 = gloo_ranks

    def bad(*paths):
        res = CliRunner().invoke(cli, ["analyze", *map(str, paths), "-q"])
        assert res.exit_code == 2, res.output
        assert "Traceback" not in res.stderr
        lines = [x for x in res.stderr.splitlines() if x.startswith("gobrrr: error")]
        assert len(lines) == 1, res.stderr
        return lines[0]

    assert "two are rank 0" in bad(r0, r0)
    doc = json.loads(r1.read_text())
    doc["distributedInfo"]["world_size"] = 4
    (tmp_path / "w4.json").write_text(json.dumps(doc))
    assert "different world sizes [2, 4]" in bad(r0, tmp_path / "w4.json")
    # given in any order, the ranks come out in rank order
    assert [h.path for h in check_traces([r1, r0])] == [r0, r1]


# ---------------------------------------------------------------- hand-made arithmetic


def _x(cat, name, ts, dur, tid=1, **args):
    return {"ph": "X", "cat": cat, "name": name, "pid": 1, "tid": tid, "ts": ts,
            "dur": dur, "args": args}


def test_communication_leaves_the_per_op_budget(tmp_path):
    # One step [0, 200). aten::mm launches a 40 us kernel at 50 on stream 7; DDP's
    # c10d::allreduce_ (with record_param_comms inside) launches a 100 us NCCL kernel at
    # 60 on stream 17, overlapping the mm kernel by 30 us. Busy time, all kernels: the
    # union [50, 160) = 110 us; without the NCCL kernel: the mm kernel's 40 us.
    mm = {"External id": 1, "Input Dims": [[4, 5], [5, 6]], "Input type": ["float", "float"],
          "Concrete Inputs": ["", ""]}
    events = [
        _x("user_annotation", "ProfilerStep#0", 0, 200),
        _x("cpu_op", "aten::mm", 10, 20, **mm),
        _x("cuda_runtime", "cudaLaunchKernel", 12, 5, correlation=11, **{"External id": 1}),
        _x("cpu_op", "c10d::allreduce_", 30, 20, **{"External id": 2}),
        _x("cpu_op", "record_param_comms", 31, 15, **{"External id": 3}),
        _x("cuda_runtime", "cudaLaunchKernel", 35, 5, correlation=12, **{"External id": 3}),
        _x("kernel", "gemm_kernel", 50, 40, tid=7, device=0, stream=7, correlation=11,
           **{"External id": 1}),
        _x("kernel", "ncclDevKernel_AllReduce_Sum_f32_RING_LL", 60, 100, tid=17, device=0,
           stream=17, correlation=12, **{"External id": 3, "Collective name": "allreduce",
                                          "In msg nelems": 1024, "dtype": "Float",
                                          "Process Group Name": "0", "Group size": 2}),
    ]
    path = tmp_path / "t.json"
    path.write_text(json.dumps({"schemaVersion": 1, "traceEvents": events,
                                "distributedInfo": {"backend": "nccl", "rank": 0,
                                                    "world_size": 2}}))
    cols = stream_trace(path)
    assert cols.device["comm"].tolist() == [0, 1]
    whole = analyse_steps(cols)
    assert whole.run.busy_s == pytest.approx(110e-6)
    kept = without_communication(cols)
    tr = analyse_steps(kept)
    assert tr.run.busy_s == pytest.approx(40e-6)
    assert [r.op for r in tr.run.counts.records] == ["aten::mm"]
    assert [k.name for k in tr.run.kernels] == ["gemm_kernel"]
    assert "1 collective kernel(s)" in kept.notes[-1]
    assert "1 collective op call(s)" in kept.notes[-1]
    # the communication pass: the NCCL kernel inside the step, 1024 fp32 = 4096 B; exposed
    # = [60, 160) minus the mm kernel [50, 90) = 70 us
    t = rank_comm(check_traces([path])[0], cols, 0, 1, "cuda")
    assert [(c.name, c.bytes, c.start_us, c.dur_us) for c in t.collectives] == [
        ("all_reduce", 4096, 60.0, 100.0)]
    assert t.exposed_us == pytest.approx(70.0)


# ---------------------------------------------------------------- the H200 x2 traces


def _as_profiler_steps(src, dst):
    """The trimmed H200 trace with its gobrrr:dist-window (3 calls of the step) wrapped
    as one ProfilerStep# range, as a user's profiler schedule would mark it. Only the
    range is added; the gobrrr window itself is dropped."""
    doc = json.loads(gzip.open(src, "rt").read())
    win = next(e for e in doc["traceEvents"] if e.get("name") == WINDOW)
    doc["traceEvents"] = [e for e in doc["traceEvents"] if e is not win]
    doc["traceEvents"].append(win | {"name": "ProfilerStep#7"})
    dst.write_text(json.dumps(doc))
    return dst


def test_h200_comm_pass_inside_profiler_steps_equals_the_window(tmp_path):
    from gobrrr.dist.comm import match_collectives

    got, want = [], []
    for r in (0, 1):
        src = DIST / f"h200_ddp_comm_rank{r}.json.gz"
        p = _as_profiler_steps(src, tmp_path / f"rank{r}.json")
        got.append(rank_comm(check_traces([p])[0], stream_trace(p), r, 3, "cuda"))
        want.append(read_trace(json.loads(gzip.open(src, "rt").read()), r, 3, "cuda"))
    for g, w in zip(got, want, strict=True):
        assert g.collectives == w.collectives
        assert g.compute == w.compute and g.bucket_copy == w.bucket_copy
        assert g.window_us == w.window_us
    matched, notes = match_collectives(got)
    # as tests/test_dist_accounting.py: 12 all-reduces per step x 3 steps, all late on
    # rank 1, of one 4096^2 fp32 layer (+ bias)
    assert (len(matched), notes) == (36, [])
    assert {m.bytes for m in matched} == {(4096 * 4096 + 4096) * 4}
    assert all(m.late_rank == 1 for m in matched)


def test_profiler_steps_window_reaches_the_work_its_steps_launched(monkeypatch):
    """A step range ends when the host is done; the all-reduces it launched may run long
    after (DDP's: launched from the backward's hooks, queued behind the compute). On
    two H200s (ddp_straggler, rank 0) a window ending with the steps read 8 of 12.
    The trimmed H200 trace keeps no NCCL launch calls: each all-reduce kernel gets one
    here, on the host before its kernel, the last four's before the step range ends and
    their kernels after it."""
    from gobrrr.dist import commread

    doc = json.loads(gzip.open(DIST / "h200_ddp_comm_rank0.json.gz", "rt").read())
    win = next(e for e in doc["traceEvents"] if e.get("name") == WINDOW)
    events = [e for e in doc["traceEvents"] if e is not win]
    kernels = sorted((e for e in events if e.get("cat") == "kernel"
                      and e["name"].startswith("ncclDevKernel")), key=lambda e: e["ts"])
    cut = kernels[-4]["ts"] - 1.0  # the host's step range ends here
    launches = [{"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernelExC",
                 "pid": win["pid"], "tid": win["tid"],
                 "ts": min(k["ts"] - 50.0, cut - 10.0 + i), "dur": 5.0,
                 "args": {"correlation": k["args"]["correlation"]}}
                for i, k in enumerate(kernels)]
    doc["traceEvents"] = [*events, *launches,
                          win | {"name": "ProfilerStep#7", "dur": cut - win["ts"]}]
    whole = read_trace(json.loads(gzip.open(DIST / "h200_ddp_comm_rank0.json.gz", "rt")
                                  .read()), 0, 3, "cuda")
    got = read_trace(doc, 0, 3, "cuda", window="ProfilerStep#")
    assert len(got.collectives) == len(whole.collectives) == 36
    assert got.collectives[-1] == whole.collectives[-1]
    # the window of the host's step range alone (the code before) misses the four
    monkeypatch.setattr(commread, "_launched_work_end", lambda cols, lo, hi: lo)
    short = read_trace(doc, 0, 3, "cuda", window="ProfilerStep#")
    assert len(short.collectives) == 32


def test_h200_trimmed_traces_have_no_ops_to_count(tmp_path):
    # The committed copies keep no aten ops (trimmed to the communication's evidence):
    # the whole merge cannot run on them, and says so in one line.
    paths = [_as_profiler_steps(DIST / f"h200_ddp_comm_rank{r}.json.gz",
                                tmp_path / f"rank{r}.json") for r in (0, 1)]
    res = CliRunner().invoke(cli, ["analyze", *map(str, paths), "-q"])
    assert res.exit_code == 2, res.output
    assert "has no operator events" in res.stderr


def test_traces_of_two_jobs_are_not_merged(gloo_ranks, tmp_path):
    # issue 28: rank traces of two runs 20 s apart were merged and a straggler invented;
    # Kineto's baseTimeNanoseconds says when each was recorded
    doc = json.loads(gloo_ranks[1].read_text())
    doc["baseTimeNanoseconds"] = int(doc["baseTimeNanoseconds"]) + 20 * 10**9
    later = tmp_path / "rank1_later.json"
    later.write_text(json.dumps(doc))
    with pytest.raises(UserError, match=r"recorded 2\d s apart: not ranks of one job"):
        analyze([gloo_ranks[0], later], ceilings=ceilings())


# The same job recorded the simplest way: one warm-up step, then a profile() block around
# four steps, no schedule, no prof.step() (issue 23: such ranks were refused).
RECORD_PLAIN = RECORD.replace(
    """with profile(activities=[ProfilerActivity.CPU], record_shapes=True,
             schedule=schedule(wait=1, warmup=1, active=3), on_trace_ready=save) as prof:
    for _ in range(5):
        step()
        prof.step()
""", """step()
with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
    for _ in range(4):
        step()
save(prof)
""")


def test_ranks_recorded_without_step_markers_merge_with_found_steps(tmp_path):
    assert RECORD_PLAIN != RECORD
    report = analyze(list(record_ranks(RECORD_PLAIN, tmp_path)), ceilings=ceilings())
    d = report.to_dict()
    validate(d, "report")
    trace = d["workload"]["trace"]
    # DDP's forward range repeats but covers a part of each step: the steps are the
    # repeated sequence of top-level calls (zero_grad, forward, backward, step)
    assert trace["step_rule"] == "repeated calls"
    # all four: a slow first step is kept for ranks (each deciding alone, they disagreed)
    assert trace["steps"] == 4
    for rank in d["distributed"]["ranks"]:
        # the collectives matched by their sequence numbers in the found steps: two
        # buckets a step, and in the first profiled step (DDP's second iteration) the
        # two small broadcasts of its bucket rebuild
        assert rank["collectives"] == 2 * 4 + 2, rank
        assert rank["fractions"]["communication"] > 0
    per_step = {c["collective"]: c for c in d["distributed"]["collectives"]}
    assert per_step.keys() <= {"all_reduce", "broadcast"}
    assert sorted(c["bytes"] for c in d["distributed"]["collectives"]
                  if c["collective"] == "all_reduce") == [525312, 526336]
    assert {"forward", "backward", "optimizer"} <= {p["name"] for p in d["budget"]["per_phase"]}


# FSDP2 ranks (examples:fsdp_comm's shape on CPU: 8 Linear 512x512 units and the root,
# batch 4, SGD), recorded the simplest way: one warm-up step, then a profile() block
# around three steps (issue 27 item 3: FSDP2 rank traces are read by analyze).
RECORD_FSDP = """
import os
import sys
import torch
import torch.distributed as dist
from torch.profiler import ProfilerActivity, profile

from gobrrr.dist.examples import EXAMPLES

out = sys.argv[1]
dist.init_process_group("gloo")
rank = dist.get_rank()
step, args = EXAMPLES["fsdp_comm"].factory(4, "cpu")
step(*args)
with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
    for _ in range(3):
        step(*args)
prof.export_chrome_trace(f"{out}/rank{rank}.json")
dist.destroy_process_group()
os._exit(0)
"""


def test_fsdp2_ranks_recorded_without_step_markers(tmp_path):
    pytest.importorskip("torch.distributed.fsdp", reason="FSDP2 needs torch >= 2.6")
    report = analyze(list(record_ranks(RECORD_FSDP, tmp_path, 180)), ceilings=ceilings())
    d = report.to_dict()
    validate(d, "report")
    assert d["workload"]["trace"]["steps"] == 3
    per_step = {c["collective"]: c for c in d["distributed"]["collectives"]}
    # each of the 8 units gathers its parameters in the forward and again in the backward
    # and reduce-scatters its gradients: 16 all-gathers and 8 reduce-scatters a step, of
    # the unit's whole parameters (512 x 512 + 512 fp32: 1,050,624 bytes)
    assert per_step.keys() == {"all_gather", "reduce_scatter"}
    assert per_step["all_gather"]["calls_per_step"] == 16
    assert per_step["reduce_scatter"]["calls_per_step"] == 8
    assert {c["bytes"] for c in per_step.values()} == {(512 * 512 + 512) * 4}
    for rank in d["distributed"]["ranks"]:
        assert rank["fractions"]["communication"] > 0


def test_a_cpu_rank_waiting_for_its_bucket_past_gloos_range_counts(tmp_path):
    # One step [0, 200) on a gloo rank. The step's thread (tid 1): backward work [0, 50),
    # bucket 0 copied back [50, 60), then idle until [150, 151), a view of bucket 1, and
    # its copy back [151, 160); optimizer work [160, 200). gloo's all-reduce of bucket 1
    # ran on its worker thread (tid 2) over [40, 120): the thread woke 30 us after it
    # ended. The whole wait [60, 150) is communication: exposed = [40, 150) less the
    # aten ops [0, 50) and [51, 59): [50, 51) and [59, 150) = 92 us (62 without the wait).
    dims = {"Input Dims": [[4, 4], [4, 4]], "Input type": ["float", "float"]}
    events = [
        _x("user_annotation", "ProfilerStep#0", 0, 200),
        _x("cpu_op", "aten::mm", 0, 50, **dims),
        _x("user_annotation", "torch.distributed.ddp.reducer::copy_bucket_to_grad", 50, 10),
        _x("cpu_op", "aten::copy_", 51, 8, **dims),
        _x("cpu_op", "aten::as_strided", 150, 1),
        _x("user_annotation", "torch.distributed.ddp.reducer::copy_bucket_to_grad", 151, 9),
        _x("cpu_op", "aten::copy_", 152, 7, **dims),
        _x("cpu_op", "aten::add_", 160, 40, **dims),
        _x("user_annotation", "gloo:all_reduce", 40, 80, tid=2,
           **{"Input Dims": [[1024]], "Input type": ["float"]}),
    ]
    path = tmp_path / "t.json"
    path.write_text(json.dumps({"schemaVersion": 1, "traceEvents": events,
                                "distributedInfo": {"backend": "gloo", "rank": 0,
                                                    "world_size": 2}}))
    cols = stream_trace(path)
    t = rank_comm(check_traces([path])[0], cols, 0, 1, "cpu")
    assert [(c.name, c.start_us, c.dur_us) for c in t.collectives] == [
        ("all_reduce", 40.0, 80.0)]
    assert t.blocked == [(60.0, 150.0)]
    assert t.exposed_us == pytest.approx(92.0)
