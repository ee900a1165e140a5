"""The compile probe's child process (remedies/compile_child.py): a real child on CPU."""

from gobrrr.models import ModelOptions
from gobrrr.remedies.compile_child import compile_in_child, reload_spec


def test_the_child_compiles_the_candidate_and_is_stopped_at_its_timeout():
    spec = reload_spec("examples:mlp", "cpu", 8, ModelOptions())
    assert spec == {"target": "examples:mlp", "device": "cpu", "batch_size": 8,
                    "options": {"seq_len": None, "image_size": None, "dtype": None,
                                "train": False}}
    # generous: a loaded 2-core CI machine starts Python, torch and Inductor slowly
    got = compile_in_child(spec, ["compile"], timeout_s=300.0)
    assert got.error is None and not got.timed_out
    assert got.compile_s is not None and 0 < got.compile_s < got.waited_s
    # stopped: 0.5 s is less than Python and torch take to start
    got = compile_in_child(spec, ["compile"], timeout_s=0.5)
    assert got.timed_out and got.compile_s is None and got.waited_s >= 0.5
    # a child that fails says why in one line
    got = compile_in_child(dict(spec, target="examples:nope"), ["compile"], 300.0)
    assert not got.timed_out and got.error.startswith("UserError: unknown example 'nope'")


def test_a_background_child_is_confined_to_its_cores_at_a_lower_priority(monkeypatch):
    import os

    from gobrrr.remedies import compile_child
    from gobrrr.remedies.compile_child import BACKGROUND_NICE, background_cores, start_child

    spec = reload_spec("examples:mlp", "cpu", 8, ModelOptions())
    core = min(os.sched_getaffinity(0))
    run = start_child(spec, ["compile"], cores=[core])
    try:
        # read at once: the child is still importing torch, its compile workers to come
        # inherit both
        assert os.sched_getaffinity(run.proc.pid) == {core}
        # (a suite already niced above it stays there: lowering a nice needs privilege)
        assert os.getpriority(os.PRIO_PROCESS, run.proc.pid) == max(
            BACKGROUND_NICE, os.getpriority(os.PRIO_PROCESS, 0))
    finally:
        run.stop()
    assert run.proc.returncode is not None
    # the search keeps a quarter of the cores (at least 2); fewer than 4: no background
    monkeypatch.setattr(compile_child.os, "sched_getaffinity", lambda pid: set(range(16)))
    assert background_cores() == list(range(4, 16))
    monkeypatch.setattr(compile_child.os, "sched_getaffinity", lambda pid: {0, 1, 2, 3})
    assert background_cores() == [2, 3]
    monkeypatch.setattr(compile_child.os, "sched_getaffinity", lambda pid: {0, 1, 2})
    assert background_cores() is None


def test_a_measuring_child_verifies_and_times_its_candidate_when_told():
    # issue 24: on the H200 at --budget-s 60 the compile paid twice (in the child, then
    # again here) did not fit for ResNet-50 b256 and the GPT-2 training step; a measuring
    # child waits after its compile for the search's turn and measures it there
    from gobrrr.remedies.compile_child import start_child

    spec = reload_spec("examples:mlp", "cpu", 8, ModelOptions())
    run = start_child(spec, ["inference_mode"], measure_ab_s=0.2)
    try:
        got = run.wait(300.0)  # generous: a loaded CI machine starts Python slowly
        assert got.error is None and got.compile_s is not None and got.run is run
        assert run.proc.poll() is None  # waiting for its turn
        row = run.measure(120.0)
    finally:
        run.stop()
    assert row is not None and row["name"] == "inference_mode"
    assert row["status"] in ("verified", "no significant change", "slower"), row
    assert row["verified"] and row["measured_speedup"] > 0 and row["checks"]["ab_rounds"] >= 8
    assert run.proc.returncode is not None
    # told nothing (its input closed): it ends without measuring
    run = start_child(spec, ["inference_mode"], measure_ab_s=0.2)
    got = run.wait(300.0)
    assert got.run is run
    run.stop()
    assert run.proc.returncode is not None
    # a plain child (not measuring) ends after its compile: nothing to answer
    run = start_child(spec, ["inference_mode"])
    got = run.wait(300.0)
    assert got.compile_s is not None and got.run is None
    assert run.proc.returncode is not None


def test_a_prestarted_child_builds_then_compiles_what_it_is_told():
    # started before the diagnosis (issue 24, session s: BERT-base's child spent its
    # first 10-18 s importing and building), told its remedies later; its wait and its
    # compile count from then
    import time

    from gobrrr.remedies.compile_child import prestart_child

    spec = reload_spec("examples:mlp", "cpu", 8, ModelOptions())
    run = prestart_child(spec, None, measure_ab_s=0.2)
    try:
        time.sleep(0.2)
        assert run.proc.poll() is None  # building, then waiting for its remedies
        run.begin(["inference_mode"])
        assert run.remedies == ("inference_mode",) and run.elapsed_s() < 1.0
        got = run.wait(300.0)  # generous: a loaded CI machine starts Python slowly
        assert got.error is None and got.compile_s is not None and got.run is run
        assert got.remedies == ("inference_mode",)
        row = run.measure(120.0)
    finally:
        run.stop()
    assert row is not None and row["name"] == "inference_mode" and row["verified"]
    # never told (the search needed no child): stopped, it ends without a word
    run = prestart_child(spec, None)
    run.stop()
    assert run.proc.returncode is not None
    # its input closed before any remedies: it ends on its own, nothing printed
    run = prestart_child(spec, None)
    run.proc.stdin.close()
    assert run.proc.wait(timeout=300) == 0
    got = run.wait(5.0)  # its output ended with no compile: no figure, not a timeout
    assert got.compile_s is None and not got.timed_out
