"""Why are eager bf16 predictions off? The parts of the prediction against the parts of
the bf16 call as it runs (GPU machine; issue 24 item 4).

`prediction-vs-measured.md`: bf16 autocast measured 0.50-0.64 of its prediction on GPT-2
8x512, ViT-B/16, the MLP at 16k and the GPT-2 training step; the eager bf16 cast
0.61-0.77 on GPT-2 8x512 and ResNet-50 b256, 1.35 on the MLP. A prediction is the fp32
diagnosis's budget less the seconds saved, floored by the host's issue time (gains.py).
Which part misses: the GPU time left, or the host's issue time (an autocast call adds a
cast op before each matmul of fp32 inputs; a cast model may run other code)?

For each case, in one process: the fp32 workload diagnosed (doctor's timer, budget and
host issue time), each precision remedy's prediction with the budget parts it leaves,
then the same workload under bf16 autocast and then cast to bf16, each diagnosed the same
way. Prints one JSON line per case; "speedup" of a variant is doctor's fp32 median over
the variant's (same process), not the A/B timer's.

    python benchmarks/precision_parts.py [CASE ...] [--device cuda|cpu]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any

CASES = {  # name: (target, batch, ModelOptions kwargs)
    "gpt2_8x512": ("hf:gpt2", 8, {"seq_len": 512}),
    "vit_b16_b32": ("torchvision:vit_b_16", 32, {}),
    "mlp_16k": ("benchmarks/optimize_targets.py:mlp_16k", 16384, {}),
    "resnet50_b256": ("torchvision:resnet50", 256, {}),
    "gpt2_train_8x256": ("hf:gpt2", 8, {"seq_len": 256, "train": True}),
}
CPU_SIZES = {"gpt2_8x512": (2, {"seq_len": 32}), "vit_b16_b32": (1, {}),
             "mlp_16k": (64, {}), "resnet50_b256": (2, {}),
             "gpt2_train_8x256": (2, {"seq_len": 32, "train": True})}


def parts(b: Any) -> dict[str, Any]:
    """A budget's figures in ms."""
    ms = 1e3
    return {"total_ms": b.total_s * ms, "busy_ms": b.busy_s * ms,
            "compute_ms": b.compute_s * ms, "memory_ms": b.memory_s * ms,
            "overhead_ms": b.overhead_s * ms,
            "host_issue_ms": None if b.host_issue_s is None else b.host_issue_s * ms,
            "compute_by_unit_ms": {k: v * ms for k, v in b.compute_s_by_unit.items()}}


def predicted(spec: Any, ctx: Any) -> dict[str, Any]:
    """A remedy's eager prediction and the budget parts it leaves (gains.py)."""
    from gobrrr.gains import host_floor_s, time_floor_s

    b = ctx.budget
    if spec.applies(ctx) is not None:
        return {"applies": spec.applies(ctx)}
    g = spec.predict(ctx)
    saved = g.saved_s
    busy_left = b.busy_s - sum(v for k, v in saved.items() if k != "overhead")
    return {"speedup": g.speedup, "saved_ms": {k: v * 1e3 for k, v in saved.items()},
            "busy_left_ms": busy_left * 1e3,
            "host_left_ms": host_floor_s(b, saved, g.host_left_s, g.host_added_s) * 1e3,
            "floor_ms": time_floor_s(b, saved, g.host_left_s, g.host_added_s) * 1e3,
            "total_after_ms": b.total_s * 1e3 / g.speedup if g.speedup else None,
            "basis": g.basis}


def one(name: str, device: str) -> dict[str, Any]:
    import torch
    from torch.utils._pytree import tree_map

    from gobrrr.api import diagnose_workload
    from gobrrr.models import ModelOptions
    from gobrrr.remedies import catalog
    from gobrrr.remedies.base import Context, reached_facts
    from gobrrr.remedies.precision import autocast_wrap, cast_dtype
    from gobrrr.state.reach import walk
    from gobrrr.targets import load_target
    from gobrrr.workload import Workload

    target, batch, opts = CASES[name]
    if device == "cpu":
        batch, opts = CPU_SIZES[name]
    w = load_target(target, device, batch, ModelOptions(**opts))
    t0 = time.perf_counter()
    rep = diagnose_workload(w, experiments=False, time_budget_s=1.0)
    ctx = Context.from_report(w.device, rep, rep.counts.records, **reached_facts(w))
    specs = {s.name: s for s in catalog.ALL}
    out: dict[str, Any] = {"case": name, "fp32": parts(rep.budget),
                           "predicted": {n: predicted(specs[n], ctx)
                                         for n in ("bf16_autocast", "bf16_cast", "tf32")}}
    fp32_ms = rep.budget.total_s * 1e3
    variants = [("bf16_autocast", None)]
    if ctx.inference:
        variants.append(("bf16_cast", cast_dtype(device)))
    for label, dtype in variants:
        if dtype is None:
            v = Workload(w.name, autocast_wrap(w.fn, device), w.args, w.kwargs, w.device)
        else:  # in place: the last variant (the fp32 figures are taken)
            for m in walk(w.fn, w.args, w.kwargs).modules:
                m.to(dtype)

            def cast(x: Any, dtype: Any = dtype) -> Any:
                return x.to(dtype) if isinstance(x, torch.Tensor) and \
                    x.is_floating_point() else x

            v = Workload(w.name, w.fn, tree_map(cast, w.args), tree_map(cast, w.kwargs),
                         w.device)
        r = diagnose_workload(v, experiments=False, time_budget_s=1.0)
        n_ops = len(r.counts.records)
        out[label] = parts(r.budget) | {
            "speedup_doctor": fp32_ms / (r.budget.total_s * 1e3), "n_ops": n_ops}
    out["fp32"]["n_ops"] = len(rep.counts.records)
    out["seconds"] = time.perf_counter() - t0
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("cases", nargs="*", default=list(CASES))
    ap.add_argument("--device", default="cuda")
    a = ap.parse_args()
    for name in a.cases:
        try:
            print(json.dumps(one(name, a.device)), flush=True)
        except Exception as e:  # one case's failure leaves the others
            print(json.dumps({"case": name, "error": f"{type(e).__name__}: {e}"}),
                  flush=True)
            print(f"{name}: {type(e).__name__}: {e}", file=sys.stderr)


if __name__ == "__main__":
    main()
