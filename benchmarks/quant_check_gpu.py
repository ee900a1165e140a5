"""torchao's weight-only quantisation through `optimize --generate`'s own code (issue 21,
item 5): only the int8 and int4 candidates of generation_optimize.plans_for, on
TinyLlama-1.1B bf16 at batch 1 (and --models/--batch), each applied to a copy, verified
by teacher-forced logits and timed A/B against plain generate, as optimize does; also
checks that Inductor's process-wide settings are unchanged afterwards.

  python benchmarks/quant_check_gpu.py --out F.json [--models tinyllama-1.1b] [--batch 1]
"""

from __future__ import annotations

import argparse
import json
import sys

import torch
import torch._inductor.config as ic

from gobrrr import generation_optimize as go

sys.path.insert(0, "benchmarks")
from generate_table import build  # noqa: E402

KEYS = ("coordinate_descent_tuning", "coordinate_descent_check_all_directions",
        "force_fuse_int_mm_with_mul", "fx_graph_cache")


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--out", required=True)
    p.add_argument("--models", default="tinyllama-1.1b")
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--budget-s", type=float, default=200)
    a = p.parse_args()
    every = go.plans_for
    go.plans_for = lambda *x, **k: [q for q in every(*x, **k) if q.quant]  # type: ignore
    rows = []
    for name in a.models.split(","):
        model = build(name, "cuda", torch.bfloat16)
        ids = torch.randint(1, model.config.vocab_size, (a.batch, 128), device="cuda")
        before = {k: getattr(ic, k) for k in KEYS}
        res = go.optimize_generation(model, ids, 64, name=name, budget_s=a.budget_s,
                                     progress=lambda m: print("  ", m, flush=True))
        d = res.to_dict()
        row = {"workload": name, "batch": a.batch, "baseline_tokens_per_s":
               d.get("baseline_tokens_per_s"), "candidates": d["candidates"],
               "inductor_unchanged": before == {k: getattr(ic, k) for k in KEYS}}
        for c in d["candidates"]:
            print(name, c["name"], c.get("tokens_per_s"), c.get("speedup"),
                  c.get("top1_agreement"), c.get("rel_err"), c.get("passed"), c.get("error"),
                  flush=True)
        print("inductor settings unchanged:", row["inductor_unchanged"], flush=True)
        rows.append(row)
        json.dump(rows, open(a.out, "w"), indent=1)


if __name__ == "__main__":
    main()
