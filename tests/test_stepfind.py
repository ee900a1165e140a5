"""Steps found in traces nobody marked (tracefile/stepfind.py): exact on synthetic traces
(times in us), and on real CPU traces recorded the simple way (a `profile()` block around
a few calls, no schedule), whose regime must be the one doctor gives."""

import json
import warnings

import pytest
import torch
from torch.profiler import ProfilerActivity, profile

from gobrrr import examples
from gobrrr.analyze import analyze
from gobrrr.tracefile import analysis
from gobrrr.tracefile.columns import stream_trace
from gobrrr.tracefile.stepfind import WARMUP_RATIO, find_steps, repeated_run

US = 1e-6


def test_the_longest_repeated_run_at_either_end_of_a_sequence():
    assert repeated_run([1, 2, 3] * 3) == (0, 3, 3)
    assert repeated_run([9, 8, 1, 2, 3, 1, 2, 3]) == (2, 3, 2)  # a start-up before the calls
    assert repeated_run([1, 2, 3, 1, 2, 3, 9]) == (0, 3, 2)  # something after them
    assert repeated_run([9, 1, 2, 1, 2, 8]) == (0, 0, 0)  # both: not found (the window rule)
    assert repeated_run([1, 2, 3, 4]) == (0, 0, 0)
    assert repeated_run([]) == (0, 0, 0)
    assert repeated_run([5, 5, 5, 5]) == (0, 1, 4)
    # a call whose layers repeat inside it, then a head: the call is the period
    call = [7, 1, 2, 1, 2, 1, 2, 3]
    assert repeated_run(call * 2) == (0, 8, 2)
    assert repeated_run(call) == (0, 0, 0)  # alone: its layers repeat inside it only
    # a call that ends in its repeated layers reads as one step per layer (the note says)
    assert repeated_run([7, 1, 2, 1, 2, 1, 2]) == (1, 2, 3)


def x(name, ts, dur, cat="cpu_op", tid=1):
    return {"ph": "X", "cat": cat, "name": name, "pid": 1, "tid": tid, "ts": ts, "dur": dur,
            "args": {}}


def trace(tmp_path, events):
    p = tmp_path / "t.json"
    p.write_text(json.dumps({"schemaVersion": 1, "traceEvents": events}))
    return stream_trace(p)


def call(t0, slow=1.0):
    """One call: linear then relu, with an op inside linear (its implementation)."""
    return [x("aten::linear", t0, 30 * slow), x("aten::addmm", t0 + 5, 20 * slow),
            x("aten::relu", t0 + 40 * slow, 10)]


def test_the_main_thread_is_not_autograds_device_thread(tmp_path):
    """A DDP training step on CUDA recorded plainly: the user's thread makes 4 top-level
    calls a step, autograd's device thread 50 (one per backward node, DDP's bucket hooks
    among them in an order that varies): the user's share of the top-level events is
    under MAIN_SHARE (on two H200s: 50 of 597), and the steps are the user's calls."""
    events = []
    for k, t0 in enumerate((1000, 3000, 5000)):
        events += [x("Optimizer.zero_grad#SGD.zero_grad", t0, 10, cat="user_annotation"),
                   x("DistributedDataParallel.forward", t0 + 20, 300,
                     cat="user_annotation"),
                   x("aten::mse_loss", t0 + 330, 10),
                   x("Optimizer.step#SGD.step", t0 + 1500, 100, cat="user_annotation")]
        nodes = [f"autograd::engine::evaluate_function: Node{i}" for i in range(46)]
        hooks = ["torch.distributed.ddp.reducer::copy_bucket_to_grad"] * 4
        order = nodes[:10 + k] + hooks + nodes[10 + k:]  # the hooks move step to step
        events += [x(n, t0 + 400 + 20 * i, 10, tid=2) for i, n in enumerate(order)]
    cols = find_steps(trace(tmp_path, events))
    assert cols.step_rule.kind == "repeated calls"
    # back to back; the last ends with the trace (its optimizer step, the last event)
    assert [(round(ts), round(dur)) for _, ts, dur in cols.steps] == [
        (1000, 2000), (3000, 2000), (5000, 1600)]
    assert cols.steps_thread == 0  # the user's thread: the first of the trace's threads


def test_repeated_calls_are_steps_and_the_startup_is_left_out(tmp_path):
    # The profiler starts at 0; three calls at 1000, 1100, 1200; nothing after the last.
    events = [x("[profiler start-up]", 0, 0, cat="python_function")]
    for t0 in (1000, 1100, 1200):
        events += call(t0)
    cols = find_steps(trace(tmp_path, events))
    assert cols.step_rule.kind == "repeated calls"
    # each step runs to the next one's first event; the last to the trace's last event
    assert cols.steps == [(0, 1000.0, 100.0), (1, 1100.0, 100.0), (2, 1200.0, 50.0)]
    assert [cols.step_rule.name(n, i) for i, (n, _, _) in enumerate(cols.steps)] == [
        "call 1", "call 2", "call 3"]
    assert cols.step_rule.note.startswith(
        "steps: the trace has no ProfilerStep# ranges; 6 of the 6 top-level events of its "
        "main thread are one sequence of 2 (aten::linear, aten::relu) repeated 3 times")


def test_a_slow_first_repeat_is_a_warm_up(tmp_path):
    # the first call's linear takes 3x: its step (1000 to 1200) is 200 us against 100
    events = call(1000, slow=3.0) + call(1200) + call(1300) + call(1400)
    cols = find_steps(trace(tmp_path, events))
    assert [s[1] for s in cols.steps] == [1200.0, 1300.0, 1400.0]
    assert 200 / 100 > WARMUP_RATIO
    assert "the first (0.20 ms, 2.0x the median of the rest) is a warm-up, left out" in (
        cols.step_rule.note)


def test_a_repeated_record_function_range_is_a_step_and_phase_ranges_are_not(tmp_path):
    events = []
    for t0 in (500, 700):
        events += [x("train_step", t0, 150, cat="user_annotation"),
                   *call(t0 + 1),
                   x("Optimizer.step#SGD.step", t0 + 60, 50, cat="user_annotation"),
                   x("aten::add_", t0 + 61, 10)]
    # an optimizer range that repeats on its own at the top level is not a step either
    events += [x("Optimizer.step#SGD.step", t, 10, cat="user_annotation") for t in (900, 950)]
    cols = find_steps(trace(tmp_path, events))
    assert cols.step_rule.kind == "record_function"
    assert cols.steps == [(0, 500.0, 150.0), (1, 700.0, 150.0)]
    assert cols.step_rule.name(0, 1) == "train_step #2"
    assert cols.step_rule.note == ('steps: the 2 record_function ranges "train_step" (no '
                                   "ProfilerStep# ranges; a range that repeats is a step)")


def test_one_call_is_one_step_from_its_first_event(tmp_path):
    events = [x("aten::mm", 1000, 40), x("aten::add", 1050, 10), x("aten::sum", 1070, 5)]
    cols = find_steps(trace(tmp_path, events))
    assert cols.step_rule.kind == "window"
    assert cols.steps == [(0, 1000.0, 75.0)]
    # a source that profiled one call of its own asks for one step even when it repeats
    twice = call(1000) + call(1100)
    assert find_steps(trace(tmp_path, twice)).steps == [(0, 1000.0, 100.0), (1, 1100.0, 50.0)]
    assert find_steps(trace(tmp_path, twice), one_step=True).steps == [(0, 1000.0, 150.0)]


def test_a_trace_of_device_work_alone_is_one_step(tmp_path):
    events = [{**x("k1", 500, 40, cat="kernel"), "pid": 0},
              {**x("k2", 600, 20, cat="kernel"), "pid": 0}]
    cols = find_steps(trace(tmp_path, events))
    assert cols.steps == [(0, 500.0, 120.0)] and cols.step_rule.kind == "window"


def test_profiler_step_ranges_win_over_everything(tmp_path):
    events = [x("ProfilerStep#4", 990, 120, cat="user_annotation"), *call(1000),
              x("ProfilerStep#5", 1110, 120, cat="user_annotation"), *call(1120)]
    cols = find_steps(trace(tmp_path, events))
    assert cols.step_rule.kind == "profiler"
    assert cols.steps == [(4, 990.0, 120.0), (5, 1110.0, 120.0)]
    assert cols.step_rule.name(5, 1) == "ProfilerStep#5"


def test_found_steps_time_the_calls_not_the_gaps_around_them(tmp_path, monkeypatch):
    # Three calls of 95 us (ops busy 90 us) 100 us apart, after 5 ms of profiler start-up
    # and before something 4 ms later: read whole, one step of 9 ms, 97% of it idle.
    # (No empty-op correction here: the steps' numbers alone; that correction is
    # tested below.)
    monkeypatch.setattr(analysis, "empty_op_us", lambda: 0.0)
    calls = [e for t0 in (5000, 5100, 5200)
             for e in (x("aten::mul", t0, 45), x("aten::add", t0 + 50, 45))]
    p = tmp_path / "t.json"
    for before, after, rule in (([], [], "repeated calls"),
                                ([x("aten::zeros", 0, 1)], [], "repeated calls"),
                                ([], [x("aten::zeros", 9000, 1)], "repeated calls"),
                                ([x("aten::zeros", 0, 1)], [x("aten::zeros", 9000, 1)],
                                 "window")):
        p.write_text(json.dumps({"schemaVersion": 1, "traceEvents": before + calls + after}))
        assert find_steps(stream_trace(p)).step_rule.kind == rule
        r = analyze([p])
        if rule == "window":  # nothing repeats at either end: one step, first to last
            assert r.workload["trace"]["steps"] == 1
            assert r.budget.wall_s == pytest.approx(9001 * US)
            continue
        assert r.workload["trace"]["steps"] == 3
        # back to back: the 5 us from a call's last op to the next call is the loop's;
        # T_wall is the median of the calls' times (100, 100, and the last: 95 us, plus
        # the loop's 5 us when nothing follows it, else 95 us to its last event's end)
        assert r.budget.wall_s == pytest.approx(100 * US)
        assert r.budget.busy_s == pytest.approx(90 * US)
    # with an empty op recorded at 5 us on this CPU: each of the 6 op events holds 5 us
    # of dispatch, overhead rather than work: busy 2 x 40 us per call
    monkeypatch.setattr(analysis, "empty_op_us", lambda: 5.0)
    p.write_text(json.dumps({"schemaVersion": 1, "traceEvents": calls}))
    r = analyze([p])
    assert r.budget.busy_s == pytest.approx(80 * US)
    assert r.budget.overhead_s == pytest.approx(20 * US)
    assert "less 5.00 us, an empty op's recorded duration on this CPU" in r.notes[0]


def _plain_trace(path, fn, args, calls):
    """A trace recorded the simplest way: a profile() block around a few calls."""
    fn(*args)
    warnings.filterwarnings("ignore", message=".*Profiler clears events.*")
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
        for _ in range(calls):
            fn(*args)
    prof.export_chrome_trace(str(path))
    return path


# Regimes unmistakable by a wide margin (1.0 of compute, 1.0 of memory, in three runs
# here); the mlp example at batch 1 is not: its overhead and memory shares trade places
# between runs under the profiler (0.55 overhead, 0.60 memory, 0.64 overhead), so it is
# checked for its steps only.
@pytest.mark.parametrize("name", ["matmul", "pointwise"])
def test_a_plain_cpu_trace_gives_the_regime_doctor_gives(name, tmp_path):
    ex = examples.get(name)
    fn, args = ex.factory(ex.default_batch("cpu"), "cpu")
    r = analyze([_plain_trace(tmp_path / f"{name}.json", fn, args, calls=4)])
    assert r.regime == ex.expected_regime, (r.fractions, r.notes)
    assert r.workload["trace"]["steps"] in (3, 4)
    assert any(n.startswith("steps: the trace has no ProfilerStep# ranges") for n in r.notes)


def test_a_call_of_identical_layers_reads_as_one_step_per_layer(tmp_path):
    # the mlp example's call is 4 identical Linear+ReLU layers and nothing else: one step
    # per layer (the rule's stated limit), 16, or 15 with a slow first layer left out
    ex = examples.get("mlp")
    fn, args = ex.factory(ex.default_batch("cpu"), "cpu")
    r = analyze([_plain_trace(tmp_path / "mlp.json", fn, args, calls=4)])
    assert r.workload["trace"]["steps"] in (15, 16)
    assert any("a call made of identical repeats would read as one step per repeat" in n
               for n in r.notes)


def test_a_plain_trace_of_gpt2_forwards_finds_the_calls(tmp_path):
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    cfg = transformers.GPT2Config(n_layer=2, n_embd=64, n_head=2, vocab_size=512,
                                  n_positions=64)
    model = transformers.GPT2LMHeadModel(cfg).eval()
    ids = torch.randint(0, 512, (2, 32))

    def forward(ids):
        with torch.no_grad():
            return model(ids).logits

    r = analyze([_plain_trace(tmp_path / "gpt2.json", forward, (ids,), calls=4)])
    # its layers repeat inside a call, but the embeddings and the head do not: one step
    # per call (the first may be left out as a warm-up)
    assert r.workload["trace"]["steps"] in (3, 4), r.notes
    assert sum(c.op == "aten::embedding" for c in r.counts.records) == 2  # wte, wpe


def test_a_plain_trace_of_training_steps_finds_the_steps(tmp_path):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU(),
                                torch.nn.Linear(64, 1))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    xb = torch.randn(32, 64)

    def step(xb):
        opt.zero_grad()
        model(xb).square().mean().backward()
        opt.step()

    r = analyze([_plain_trace(tmp_path / "train.json", step, (xb,), calls=5)])
    assert r.workload["trace"]["steps"] in (4, 5)
    phases = {row.name for row in r.budget.per_phase}
    assert {"forward", "backward", "optimizer"} <= phases, phases


# ---------------------------------------------------------------- the health check


def _check(report):
    return {r["item"]: r for r in report.workload["trace"]["check"]}


def test_the_check_of_an_h200_training_step_names_its_gaps():
    from pathlib import Path

    r = analyze([Path(__file__).parent / "data" / "traces" / "gpt2_train_step.json.gz"])
    c = _check(r)
    assert list(c) == ["device activity", "steps", "shapes", "ops rebuilt", "FLOP formulas",
                       "kernel links", "outside the steps", "graphs and compiled code",
                       "profiler cost", "events"]
    assert r.workload["trace"]["step_rule"] == "profiler"
    assert c["steps"] == {"item": "steps", "ok": True,
                          "detail": "1 step(s): its ProfilerStep# ranges"}
    # AdamW's foreach ops over GPT-2's parameter list: recorded, not rebuildable
    assert not c["ops rebuilt"]["ok"]
    assert c["ops rebuilt"]["detail"].startswith("9 of 1650 op calls (")
    assert "aten::_foreach_add_" in c["ops rebuilt"]["detail"]
    assert c["shapes"]["ok"] and c["kernel links"]["ok"] and c["events"]["ok"]


def test_the_check_says_what_is_missing_and_what_it_costs(tmp_path):
    # Ops without shapes, CUDA runtime calls with no kernels (the profile lacked CUDA
    # activity), a CUDA graph launch, a malformed event.
    events = []
    for t0 in (1000, 1100):
        events += [x("aten::mm", t0, 60), x("aten::add", t0 + 70, 20),
                   x("cudaLaunchKernel", t0 + 5, 3, cat="cuda_runtime"),
                   x("cudaGraphLaunch", t0 + 80, 3, cat="cuda_runtime")]
    events.append({"ph": "X", "cat": "cpu_op", "name": "aten::bad", "ts": "x", "dur": 1})
    p = tmp_path / "t.json"
    p.write_text(json.dumps({"schemaVersion": 1, "traceEvents": events}))
    r = analyze([p])
    c = _check(r)
    assert not c["device activity"]["ok"]
    assert c["device activity"]["detail"].startswith("none, though 4 CUDA runtime calls were "
                                                     "recorded")
    assert c["shapes"] == {"item": "shapes", "ok": False, "detail": (
        "2 of 2 op calls (100% of the step's op time; aten::add, aten::mm) recorded without "
        "shapes: no FLOPs or bytes, their regime is a guess from their names")}
    assert c["graphs and compiled code"]["detail"] == ("2 CUDA graph launch(es): their "
                                                       "kernels carry no op or shapes")
    assert c["events"] == {"item": "events", "ok": False,
                           "detail": "9 read; 1 malformed, left out"}
    assert r.workload["trace"]["step_rule"] == "repeated calls"


def test_analyze_check_prints_only_the_check(tmp_path):
    from click.testing import CliRunner

    from gobrrr.cli import cli
    from gobrrr.schema import validate

    p = tmp_path / "t.json"
    p.write_text(json.dumps({"schemaVersion": 1, "traceEvents": call(1000) + call(1100)}))
    out = CliRunner().invoke(cli, ["analyze", str(p), "--check", "-q"])
    assert out.exit_code == 0, out.output
    lines = out.stdout.splitlines()
    assert [ln.split()[1] for ln in lines] == ["device", "steps", "shapes", "ops",
                                               "outside", "graphs", "profiler",
                                               "events"]
    assert lines[1].startswith("GAP steps") and "a sequence of 2 top-level calls" in lines[1]
    js = CliRunner().invoke(cli, ["analyze", str(p), "--check", "--json", "-q"])
    assert [r["item"] for r in json.loads(js.stdout)["check"]][:2] == ["device activity",
                                                                     "steps"]
    full = CliRunner().invoke(cli, ["analyze", str(p), "--json", "-q"])
    validate(json.loads(full.stdout), "report")


def test_the_last_call_ends_with_its_own_events_not_the_code_after_the_loop(tmp_path):
    # Three calls of 50 us at 1000, 1100, 1200 (50 us of loop between them), then a
    # torch.cuda.synchronize() and the profiler's exit, which record no cpu_op: a
    # cudaDeviceSynchronize from 1300 to 1400. Read to the trace's end the last step
    # would be 200 us; it ends at its last event (1250) plus the loop's median 50 us.
    events = [e for t0 in (1000, 1100, 1200) for e in call(t0)]
    events.append(x("cudaDeviceSynchronize", 1300, 100, cat="cuda_runtime"))
    cols = find_steps(trace(tmp_path, events))
    assert cols.step_rule.kind == "repeated calls"
    assert cols.steps == [(0, 1000.0, 100.0), (1, 1100.0, 100.0), (2, 1200.0, 100.0)]


def test_found_steps_take_the_median_call_as_t_wall(tmp_path, monkeypatch):
    monkeypatch.setattr(analysis, "empty_op_us", lambda: 0.0)  # the steps alone
    # Four calls of two 45 us ops; the third spends 105 us between its ops (a slow
    # Python stretch, a descheduled thread): the calls take 100, 100, 200 and 95 us
    # (the last: to its last event's end). T_wall is the median, 100 us (the mean would
    # be 123.75 us), the busy time the mean of the ops' 90 us.
    calls = []
    for t0, gap in ((1000, 5), (1100, 5), (1200, 105), (1400, 5)):
        calls += [x("aten::mul", t0, 45), x("aten::add", t0 + 45 + gap, 45)]
    p = tmp_path / "t.json"
    p.write_text(json.dumps({"schemaVersion": 1, "traceEvents": calls}))
    r = analyze([p])
    assert r.workload["trace"]["steps"] == 4
    assert r.budget.wall_s == pytest.approx(100 * US)
    assert r.budget.busy_s == pytest.approx(90 * US)
    assert r.budget.overhead_s == pytest.approx(10 * US)
    assert ("T_wall per step is the median of the 4 calls' times (0.100 ms; their mean "
            "0.124 ms), as doctor takes the median of its calls: the profiler slows calls "
            "unevenly") in r.notes


def test_a_range_with_the_steps_work_between_its_repeats_is_not_the_step(tmp_path):
    # DDP's forward range recorded on a loaded 2-core CPU (CI): its waits on the other
    # rank made it cover more than half of the time, and it was read as the step
    events = []
    for t0 in (1000, 3000, 5000):
        events += [x("Optimizer.zero_grad#SGD.zero_grad", t0, 10, cat="user_annotation"),
                   x("DistributedDataParallel.forward", t0 + 20, 1500,
                     cat="user_annotation"),
                   x("aten::sum", t0 + 1530, 10),
                   x("Optimizer.step#SGD.step", t0 + 1600, 100, cat="user_annotation")]
    cols = find_steps(trace(tmp_path, events))
    assert 3 * 1500 > 0.5 * (5000 + 1700 - 1000)  # it covers more than half the time
    assert cols.step_rule.kind == "repeated calls"
    assert [round(ts) for _, ts, _ in cols.steps] == [1000, 3000, 5000]
    # an inference loop's range around a part of each call, with the calls' other work
    # (three top-level ops) between its repeats
    events = []
    for t0 in (1000, 2000, 3000):
        events += [x("encoder", t0, 600, cat="user_annotation"),
                   *call(t0 + 610), x("aten::softmax", t0 + 700, 10)]
    cols = find_steps(trace(tmp_path, events))
    assert cols.step_rule.kind == "repeated calls"
    # a step range with the loop's own call between its repeats (a DataLoader's
    # __next__) is the step
    events = []
    for t0 in (1000, 2000, 3000):
        events += [x("enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__", t0, 50,
                     cat="user_annotation"),
                   x("train_step", t0 + 60, 800, cat="user_annotation"),
                   *call(t0 + 61),
                   x("Optimizer.step#SGD.step", t0 + 200, 50, cat="user_annotation")]
    cols = find_steps(trace(tmp_path, events))
    assert cols.step_rule.kind == "record_function"
    assert cols.steps == [(0, 1060.0, 800.0), (1, 2060.0, 800.0), (2, 3060.0, 800.0)]
