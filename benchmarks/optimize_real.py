"""gobrrr optimize on real models, with the default budget, against an expert's best.

Usage (GPU machine): PYTHONPATH=src python3 benchmarks/optimize_real.py --out $OUT/real \
    --case gpt2_8x512 --case mlp_16k [--budget-s 120]
Each case runs `gobrrr.api.optimize_workload` with --budget-s (diagnosis included) on an
inference workload run with autograd on, as the issue measured it: GPT-2 small (random
weights, transformers' GPT2LMHeadModel) at 8x512 tokens and at 1 token, ResNet-50 at
batch 1, an MLP of 4 Linear(512) at batch 16384 in fp32. Writes real.json (every row,
the run's wall time against its budget) and real.txt (progress with timestamps).

Expert reference points (the issue, H200): GPT-2 8x512 bf16 autocast +
compile(reduce-overhead) ~9x; GPT-2 1 token compile(reduce-overhead) under no_grad ~18x;
ResNet-50 batch 1 bf16 + compile(reduce-overhead) ~9x; MLP 16k the model cast to bf16
~5.8x.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

DEV = "cuda"


def gpt2(batch: int, tokens: int) -> Callable[[], tuple]:
    def make() -> tuple:
        import torch
        from transformers import GPT2Config, GPT2LMHeadModel

        torch.manual_seed(0)
        model = GPT2LMHeadModel(GPT2Config()).to(DEV).eval()
        ids = torch.randint(0, 50257, (batch, tokens), device=DEV)

        def forward(ids: Any) -> Any:
            return model(ids).logits

        return forward, (ids,)

    return make


def resnet50() -> tuple:
    import torch
    import torchvision

    torch.manual_seed(0)
    model = torchvision.models.resnet50().to(DEV).eval()
    return model, (torch.randn(1, 3, 224, 224, device=DEV),)


def mlp_16k() -> tuple:
    import torch
    from torch import nn

    torch.manual_seed(0)
    layers: list[nn.Module] = []
    for _ in range(4):
        layers += [nn.Linear(512, 512), nn.ReLU()]
    model = nn.Sequential(*layers).to(DEV).eval()
    return model, (torch.randn(16384, 512, device=DEV),)


CASES: dict[str, Callable[[], tuple]] = {
    "gpt2_8x512": gpt2(8, 512), "gpt2_1tok": gpt2(1, 1), "resnet50_b1": resnet50,
    "mlp_16k": mlp_16k,
}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--case", action="append", choices=sorted(CASES), required=True)
    ap.add_argument("--budget-s", type=float, default=120.0)
    opts = ap.parse_args()
    opts.out.mkdir(parents=True, exist_ok=True)
    log = open(opts.out / "real.txt", "w")  # noqa: SIM115 - closed at the end
    t0 = time.perf_counter()

    def say(msg: str) -> None:
        line = f"[{time.perf_counter() - t0:6.1f}s] {msg}"
        print(line, file=log, flush=True)
        print(line, file=sys.stderr, flush=True)

    import torch

    from gobrrr.api import optimize_workload
    from gobrrr.hardware import calibrate
    from gobrrr.workload import from_callable

    say(f"torch {torch.__version__} {torch.cuda.get_device_name(0)}")
    calibrate(DEV)  # cached: each case's budget is spent on the case
    say("calibrated")
    results: dict[str, Any] = {}
    for name in opts.case:
        fn, args = CASES[name]()
        w = from_callable(fn, args, name=name)
        t_case = time.perf_counter()
        try:
            res = optimize_workload(w, budget_s=opts.budget_s,
                                    progress=lambda m, n=name: say(f"{n}: {m}"))
            d = res.to_dict()
            d["wall_s"] = time.perf_counter() - t_case
            results[name] = d
            for row in d["remedies"]:
                pred, meas = row["predicted_speedup"], row["measured_speedup"]
                say(f"{name}: {row['name']:<50} {row['status']:<14} "
                    f"pred {pred or 0:6.2f} meas {meas or 0:6.2f} "
                    f"prep {row['compile_s'] or 0:5.1f} {row['reason'][:150]}")
            say(f"{name}: BEST {d['best']['name']} {d['best']['measured_speedup']:.2f}x; "
                f"wall {d['wall_s']:.1f} s of budget {opts.budget_s:g} s "
                f"(diagnosis {d['diagnose_s']:.1f} s)")
        except Exception:  # noqa: BLE001 - one case failing must not end the run
            results[name] = {"error": traceback.format_exc()[-2000:]}
            say(f"{name}: ERROR {traceback.format_exc()[-2000:]}")
        finally:
            fn = args = w = None  # type: ignore[assignment]
            torch._dynamo.reset()
            torch.cuda.empty_cache()
    (opts.out / "real.json").write_text(json.dumps(results, indent=1, default=str))
    log.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
