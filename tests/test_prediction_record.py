"""How far optimize's predictions have been off, by kind (issue 24, item 4): exact
numbers on synthetic rows; the package's validation summary against the committed rows."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from gobrrr.remedies import prediction_record as pr

ROOT = Path(__file__).resolve().parents[1]


def row(name, predicted, measured, status="verified"):
    return {"name": name, "components": name.split("+"), "status": status,
            "predicted_speedup": predicted, "measured_speedup": measured}


@pytest.mark.parametrize(("components", "kind"), [
    (("bf16_cast", "inference_mode", "compile_reduce_overhead", "freezing"), "compiled"),
    (("freezing",), "compiled"),
    (("bf16_cast", "cuda_graphs"), "CUDA graph"),
    (("fused_optimizer", "tf32"), "precision"),
    (("bf16_autocast",), "precision"),
    (("channels_last", "inference_mode"), "eager"),
    (("fused_optimizer",), "eager"),
])
def test_a_prediction_is_of_the_kind_of_its_costliest_mechanism(components, kind):
    assert pr.kind_of(components) == kind


def test_only_measured_predictions_count():
    rows = [row("tf32", 2.0, 1.0), row("cuda_graphs", 1.25, 1.5, "no significant change"),
            row("compile", 1.5, 0.75, "slower"), row("bf16_cast", 2.0, None, "skipped"),
            row("channels_last", 1.2, 1.1, "rejected"), row("inference_mode", None, 1.1),
            row("sdpa", 1.1, 1.2, "unverifiable")]
    assert pr.checked(rows) == [("precision", "tf32", 0.5), ("CUDA graph", "cuda_graphs", 1.2),
                                ("compiled", "compile", 0.5)]


def test_summary_counts_within_one_and_a_half_either_way():
    s = pr.summarize([0.5, 1.0, 1.5, 2.0, 0.7])
    assert (s.n, s.within, s.low, s.median, s.high) == (5, 3, 0.5, 1.0, 2.0)
    assert s.text() == "5 measured: 0.50-2.00x of predicted, median 1.00x; 3 of 5 within 1.5x"
    assert pr.summarize([]) is None
    assert pr.summarize([0.8]).text() == "1 measured: 0.80x of its prediction"
    assert pr.summarize([0.221, 0.222]).text() == ("2 measured: each 0.22x of predicted; 0 "
                                                   "of 2 within 1.5x")


def test_the_machine_record_is_read_before_this_run_is_added():
    # tests/conftest.py gives each test its own cache folder
    first = pr.for_run("cpu", "w", [row("tf32", 2.0, 1.0), row("compile", 2.0, 3.0)])
    assert [k["kind"] for k in first] == ["compiled", "precision"]
    assert first[1]["this_run"]["median"] == 0.5 and first[1]["this_machine"] is None
    assert first[1]["validation"] is None  # the committed suite is CUDA's
    second = pr.for_run("cpu", "w", [row("bf16_cast", 1.0, 1.0)])
    assert second[0]["this_run"]["n"] == 1
    assert second[0]["this_machine"] == {"n": 1, "within": 0, "low": 0.5, "median": 0.5,
                                         "high": 0.5}
    assert pr.machine("cpu")["precision"].n == 2


def test_a_damaged_record_keeps_its_good_entries():
    pr.record("cpu", "w", [("eager", "fused_optimizer", 1.1)])
    path = pr.record_path("cpu")
    data = json.loads(path.read_text())
    data["entries"] += [{"kind": "eager"}, {"kind": "warp", "ratio": 1.0},
                        {"kind": "eager", "ratio": "nan"}]
    path.write_text(json.dumps(data))
    assert pr.machine("cpu")["eager"].n == 1


def test_cuda_runs_read_the_validation_suite():
    got = pr.lines("cuda", [("compiled", "compile", 0.9)], {})
    assert got[0]["validation"]["n"] > 0
    committed = json.loads((ROOT / "src" / "gobrrr" / "remedies" /
                            "prediction_record.json").read_text())
    assert got[0]["validation_source"] == committed["source"]
    assert "nine models" in committed["source"]


def test_an_installation_without_the_suite_cites_none(monkeypatch):
    monkeypatch.setattr(pr, "VALIDATION_FILE", "missing.json")
    assert pr.validation("cuda") is None
    assert pr.lines("cuda", [("compiled", "compile", 0.9)], {})[0]["validation"] is None


def test_the_package_summary_is_what_the_committed_rows_give():
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "prediction_table.py"),
                           "--check"], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr


def test_terminal_and_page_say_it():
    from gobrrr.show.optimize_html import render_optimize
    from gobrrr.show.terminal import prediction_record_lines

    record = pr.lines("cuda", [("precision", "tf32", 0.5), ("precision", "bf16_cast", 1.0)],
                      {"precision": pr.summarize([1.2])})
    text = prediction_record_lines(record)
    assert text[0].startswith("How far the predictions have been off")
    assert text[1].startswith("  precision: this run 2 measured: 0.50-1.00x of predicted, "
                              "median 0.75x; 1 of 2 within 1.5x; the validation suite (")
    assert text[1].endswith("this machine's earlier runs: 1 measured: 1.20x of its "
                            "prediction")
    cpu = prediction_record_lines(pr.lines("cpu", [("eager", "fused_optimizer", 1.0)], {}))
    assert cpu[0].endswith("speedup; no validation suite for this device):")
    page = render_optimize({"workload": {"name": "w", "device": "cuda"}, "best": {
        "name": "eager", "status": "baseline"}, "remedies": [], "snippet": "",
        "prediction_record": record})
    assert "How far the predictions have been off" in page and "1.20x of its" in page
