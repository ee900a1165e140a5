"""torch.compile's predicted speedup on CPU (doctor's, with the compiled call's calibrated
host cost: savings.compiled_call) against the compile measured on the same workloads.

    python benchmarks/cpu_compile_prediction.py OUT.json [--only NAME ...]

Each workload: doctor's budget, and from it the default compile's prediction twice, with
the calibrated cost of a compiled call (`predicted`; a predicted loss as its speedup under
1) and without it (`predicted_before`: the dispatch alone, an upper bound, what doctor
predicted before); then eager and torch.compile(fn) (default mode) timed alternately,
five rounds of gobrrr's timer each, medians. Prints a line a workload and writes every
row to OUT.json.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path
from typing import Any

CASES: dict[str, tuple[str, int | None, dict[str, Any]]] = {
    "mlp_b1": ("examples:mlp", 1, {}),
    "mlp_b256": ("examples:mlp", 256, {}),
    "transformer_b1": ("examples:transformer", 1, {}),
    "mlp_train": ("examples:mlp_train", None, {}),
    "gpt2_1x8": ("hf:gpt2", 1, {"seq_len": 8}),
    "bert_1x16": ("hf:bert-base-uncased", 1, {"seq_len": 16}),
}
ROUNDS = 5


def predictions(report: Any, facts: dict[str, Any]) -> tuple[float | None, float | None]:
    """(with the compiled call's cost, without it) for the default compile."""
    from dataclasses import replace

    from gobrrr.gains import predicted_loss
    from gobrrr.remedies.base import Context
    from gobrrr.remedies.compiled import predict_default

    def speedup(ceil: Any) -> float | None:
        ctx = Context("cpu", report.budget, ceil, report.counts.records,
                      param_storages=facts["param_storages"])
        gain = predict_default(ctx)
        return gain.speedup or predicted_loss(report.budget, gain)

    before = replace(report.ceilings, compiled_call_s=None, compiled_tensor_s=None)
    return speedup(report.ceilings), speedup(before)


def run(name: str) -> dict[str, Any]:
    import torch

    import gobrrr
    from gobrrr.models import ModelOptions
    from gobrrr.remedies.base import reached_facts
    from gobrrr.targets import load_target
    from gobrrr.timing import measure

    target, batch, opts = CASES[name]
    model_opts = ModelOptions(**opts) if opts else None
    w = load_target(target, "cpu", batch, model_opts)
    report = gobrrr.diagnose(w.fn, *w.args, kwargs=w.kwargs, experiments=False,
                             time_budget_s=1.0)
    pred, before = predictions(report, reached_facts(w))
    compiled = torch.compile(w.fn)
    t0 = time.perf_counter()
    compiled(*w.args, **w.kwargs)
    compile_s = time.perf_counter() - t0
    eager_s, comp_s = [], []
    for _ in range(ROUNDS):
        eager_s.append(measure(lambda: w.fn(*w.args, **w.kwargs), budget_s=0.5).median_s)
        comp_s.append(measure(lambda: compiled(*w.args, **w.kwargs), budget_s=0.5).median_s)
    e, c = statistics.median(eager_s), statistics.median(comp_s)
    return {"case": name, "target": target, "batch": batch, "options": opts,
            "doctor_wall_s": report.timing.median_s, "predicted": pred,
            "predicted_before": before, "eager_s": e, "compiled_s": c, "measured": e / c,
            "compile_s": compile_s, "ratio": (pred / (e / c)) if pred else None}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("out", type=Path)
    ap.add_argument("--only", nargs="*", default=list(CASES))
    a = ap.parse_args()
    rows = []
    for name in a.only:
        row = run(name)
        rows.append(row)
        print(f"{name}: predicted {row['predicted']:.2f}x (before: "
              f"{row['predicted_before'] or 0:.2f}x), measured "
              f"{row['measured']:.2f}x (eager {row['eager_s'] * 1e6:.0f} us, compiled "
              f"{row['compiled_s'] * 1e6:.0f} us; compile {row['compile_s']:.0f} s)",
              flush=True)
        a.out.write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
