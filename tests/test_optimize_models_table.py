"""benchmarks/optimize_models.py's table: the winning stack's predicted time per call
over its measured one, beside the speedups (issue 24's table)."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _module():
    spec = importlib.util.spec_from_file_location(
        "optimize_models", ROOT / "benchmarks" / "optimize_models.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules["optimize_models"] = mod  # its dataclasses look their module up
    spec.loader.exec_module(mod)
    return mod


def _gobrrr(**extra):
    # GPT-2 1x1's shape on an H100 (session ag): diagnosed 9.34 ms, the stack predicted
    # 21.63x (432 us a call), measured at 620 us a call beside eager's ~7 ms
    return {"case": "gpt2_1x1", "side": "gobrrr", "best": "a+b", "speedup": 11.21,
            "predicted_speedup": 21.63, "budget_s": 60.0, "seconds": 63.0,
            "created": "2026-12-06 00:00 UTC", "diagnosed_eager_s": 9.34e-3,
            "remedies": [{"name": "a", "candidate_s": 1e-3},
                         {"name": "a+b", "candidate_s": 6.2e-4}]} | extra


def test_the_time_ratio_is_the_predicted_time_over_the_measured_one():
    m = _module()
    assert m._time_ratio(_gobrrr()) == 9.34e-3 / 21.63 / 6.2e-4  # 0.70
    assert m._time_ratio(_gobrrr(diagnosed_eager_s=None)) is None  # rows before ag
    assert m._time_ratio(_gobrrr(best="c")) is None


def test_the_table_shows_it(tmp_path):
    m = _module()
    (tmp_path / "g.json").write_text(json.dumps(_gobrrr()))
    (tmp_path / "h.json").write_text(json.dumps(
        {"case": "gpt2_1x1", "side": "hand", "best": "cast", "speedup": 8.68,
         "seconds": 72.0, "max_autotune": False}))
    m.table([tmp_path], tmp_path / "t.json", tmp_path / "t.md", card="H100")
    row = (tmp_path / "t.md").read_text().splitlines()[-1]
    assert "| a+b | 11.21x | 21.63x | 0.70 | no | 129% | 63 (60) | yes |" in row
    assert json.loads((tmp_path / "t.json").read_text())[0]["time_ratio"] == \
        9.34e-3 / 21.63 / 6.2e-4


def test_a_row_says_whether_both_searches_ended_on_one_stack():
    # the H100's training row (session aj): gobrrr 4.30x, the hand 4.55x, one stack
    m = _module()
    assert m.same_stack("fused_optimizer+bf16_autocast+compile_reduce_overhead",
                        "autocast+fused_adamw+compile(reduce-overhead)")
    # another compile mode, a remedy the hand search has not, one part more
    assert not m.same_stack("bf16_cast+channels_last+compile_reduce_overhead",
                            "cast+channels_last+compile(default)")
    assert not m.same_stack("cuda_graphs", "cast")
    assert not m.same_stack("bf16_cast+inference_mode", "cast")
