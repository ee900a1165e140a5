"""gobrrr optimize on the H200: each workload's best verified speedup and its prediction.

Usage (GPU machine): PYTHONPATH=src python3 benchmarks/optimize_gpu.py --out $OUT/opt
Writes 3 files: optimize.json (every result), optimize.md (predicted vs measured table),
optimize.txt (versions and progress). Stays under ~4.5 minutes: each workload tries
only the remedies its case is about (--only), and later workloads are skipped, with a
note, once the global deadline nears.

Known cases from the optimize issue / docs/reference.md: x.cos().cos() fused ~1.8x; MLP batch
16 with CUDA graphs >= 2x; fp32 matmul with TF32 >= 5x; an Adam step captured
(capturable) or compiled.
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
DEADLINE_S = 250.0  # stop starting workloads after this; the last one has budget left


def cos_cos() -> tuple:
    import torch

    x = torch.randn(2**28, device=DEV)  # 1 GiB fp32, as in docs/reference.md
    return (lambda x: x.cos().cos()), (x,)


def mlp16() -> tuple:
    from gobrrr.examples import mlp

    return mlp(16, DEV)


def matmul_fp32() -> tuple:
    import torch

    g = torch.Generator(device=DEV).manual_seed(0)
    a = torch.randn(8192, 4096, device=DEV, generator=g)
    b = torch.randn(4096, 4096, device=DEV, generator=g)
    return torch.mm, (a, b)


def adam_step() -> tuple:
    from gobrrr.examples import mlp_train

    return mlp_train(16, DEV)  # Adam as users write it: capturable=False


def attention_by_hand() -> tuple:
    """softmax(Q K^T / sqrt(d)) V written out, bf16, [8, 16, 1024, 64]: the pattern of
    Inductor's fuse_attention rewrite (_sfdp_pattern_1)."""
    import torch

    g = torch.Generator(device=DEV).manual_seed(0)
    q, k, v = (torch.randn(8, 16, 1024, 64, device=DEV, dtype=torch.bfloat16, generator=g)
               for _ in range(3))

    def attend(q: Any, k: Any, v: Any) -> Any:
        with torch.no_grad():
            return torch.matmul(q, k.transpose(-2, -1)).div(8.0).softmax(dim=-1).matmul(v)

    return attend, (q, k, v)


def resnet18() -> tuple:
    import torch
    import torchvision

    torch.manual_seed(0)
    model = torchvision.models.resnet18().to(DEV).eval()
    x = torch.randn(64, 3, 224, 224, device=DEV)

    def forward(x: Any) -> Any:
        with torch.no_grad():
            return model(x)

    return forward, (x,)


# name -> (factory, remedies to try, seconds for remedies + combinations)
CASES: list[tuple[str, Callable[[], tuple], list[str], float]] = [
    ("cos_cos_2^28", cos_cos, ["compile"], 30),
    ("mlp_b16", mlp16, ["cuda_graphs", "compile_reduce_overhead"], 45),
    ("matmul_fp32_8192x4096x4096", matmul_fp32, ["tf32", "bf16_autocast"], 20),
    ("adam_step_b16", adam_step, ["cuda_graphs", "fused_optimizer", "compile"], 70),
    ("attention_by_hand_bf16", attention_by_hand, ["sdpa"], 30),
    ("resnet18_b64_fp32", resnet18, ["channels_last", "tf32"], 30),
]


def _x(v: float | None) -> str:
    return "-" if v is None else f"{v:.2f}x"


def _miss(pred: float | None, meas: float | None) -> str:
    if not pred or not meas:
        return ""
    return f"{100 * (meas - pred) / pred:+.0f}%"


def markdown(results: dict[str, Any]) -> str:
    lines = ["| workload | remedy | status | predicted | measured | 95% interval | "
             "miss | verified (max err) | prep s |", "|---|---|---|---|---|---|---|---|---|"]
    best_lines = ["", "| workload | regime | best verified | predicted | measured |",
                  "|---|---|---|---|---|"]
    for name, r in results.items():
        if "error" in r:
            lines.append(f"| {name} | - | error | - | - | - | - | - | - |")
            continue
        for row in r["remedies"]:
            iv = row["interval"]
            ivs = f"{iv[0]:.2f}-{iv[1]:.2f}" if iv else "-"
            err = f"yes ({row['max_error']:.2g})" if row["verified"] else (
                "no" if row["max_error"] is not None else "-")
            prep = f"{row['compile_s']:.1f}" if row["compile_s"] is not None else "-"
            lines.append(f"| {name} | {row['name']} | {row['status']} | "
                         f"{_x(row['predicted_speedup'])} | {_x(row['measured_speedup'])} | "
                         f"{ivs} | {_miss(row['predicted_speedup'], row['measured_speedup'])}"
                         f" | {err} | {prep} |")
        b = r["best"]
        best_lines.append(f"| {name} | {r.get('regime')} | {b['name']} | "
                          f"{_x(b['predicted_speedup'])} | {_x(b['measured_speedup'])} |")
    return "\n".join(lines + best_lines) + "\n"


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--only-case", nargs="*", default=None)
    opts = ap.parse_args()
    opts.out.mkdir(parents=True, exist_ok=True)
    log = open(opts.out / "optimize.txt", "w")  # noqa: SIM115 - closed at the end

    def say(msg: str) -> None:
        line = f"[{time.perf_counter() - t0:6.1f}s] {msg}"
        print(line, file=log, flush=True)
        print(line, file=sys.stderr, flush=True)

    t0 = time.perf_counter()
    import torch

    from gobrrr.api import optimize_workload
    from gobrrr.workload import from_callable

    say(f"torch {torch.__version__} cuda {torch.version.cuda} "
        f"{torch.cuda.get_device_name(0) if torch.cuda.is_available() else 'NO CUDA'} "
        f"python {sys.version.split()[0]}")
    if not torch.cuda.is_available():
        say("no CUDA device: nothing to do")
        return 1
    results: dict[str, Any] = {}
    for name, factory, only, budget_s in CASES:
        if opts.only_case and name not in opts.only_case:
            continue
        left = DEADLINE_S - (time.perf_counter() - t0)
        if left < 20:
            results[name] = {"error": "skipped: the script's deadline was near"}
            say(f"{name}: skipped (deadline)")
            continue
        say(f"=== {name}: {', '.join(only)}")
        t_case = time.perf_counter()
        try:
            fn, args = factory()
            w = from_callable(fn, args, name=name)
            res = optimize_workload(w, budget_s=min(budget_s, left - 10), only=only,
                                    ab_budget_s=1.0, time_budget_s=0.5,
                                    progress=lambda m, n=name: say(f"{n}: {m}"))
            d = res.to_dict()
            d["case_s"] = time.perf_counter() - t_case
            results[name] = d
            for row in d["remedies"]:
                say(f"{name}: {row['name']:<28} {row['status']:<22} predicted "
                    f"{_x(row['predicted_speedup'])} measured {_x(row['measured_speedup'])}"
                    f"  {row['reason'][:160]}")
            say(f"{name}: best {d['best']['name']} {_x(d['best']['measured_speedup'])} "
                f"in {d['case_s']:.1f}s")
        except Exception as exc:  # noqa: BLE001 - one case failing must not end the run
            results[name] = {"error": f"{type(exc).__name__}: {exc}"[:500]}
            say(f"{name}: ERROR {traceback.format_exc()[-1500:]}")
        finally:
            fn = args = w = res = None  # type: ignore[assignment]
            torch._dynamo.reset()
            torch.cuda.empty_cache()
    (opts.out / "optimize.json").write_text(json.dumps(results, indent=1, default=str))
    (opts.out / "optimize.md").write_text(markdown(results))
    say(f"done in {time.perf_counter() - t0:.1f}s")
    log.close()
    print(markdown(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
