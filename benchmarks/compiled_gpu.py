"""Compiled models on the GPU: does `gobrrr doctor` of a torch.compile'd GPT-2 and
ResNet-50 agree with the eager diagnosis (same dominant regime unless the compiled budget
explains the change), with compile time apart and T_wall within 20% of a plain loop?

For each model: eager; compiled fresh (default mode); the same compiled model again
(warm); compiled fresh with mode="reduce-overhead". Random weights, no downloads.
Usage (GPU machine): python3 benchmarks/compiled_gpu.py OUT.json
"""

from __future__ import annotations

import json
import statistics
import sys
import time

import torch

import gobrrr


def gpt2(batch: int = 8, seq: int = 512):
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    model = GPT2LMHeadModel(GPT2Config()).cuda().eval()
    g = torch.Generator(device="cuda").manual_seed(0)
    ids = torch.randint(0, 50257, (batch, seq), device="cuda", generator=g)
    return model, (ids,)


def resnet50(batch: int = 64):
    import torchvision

    torch.manual_seed(0)
    model = torchvision.models.resnet50().cuda().eval()
    g = torch.Generator(device="cuda").manual_seed(0)
    return model, (torch.randn(batch, 3, 224, 224, device="cuda", generator=g),)


def plain_loop_s(fn, args, calls: int = 20) -> float:
    for _ in range(3):
        fn(*args)
    torch.cuda.synchronize()
    times = []
    for _ in range(calls):
        t0 = time.perf_counter()
        fn(*args)
        torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def row(label: str, rep, loop_s: float | None) -> dict:
    d = rep.to_dict()
    c = d["compiled"] or {}
    out = {"case": label, "regime": d["regime"],
           "fractions": {k: round(v, 3) for k, v in d["fractions"].items()},
           "t_wall_ms": round(d["timing"]["median_s"] * 1e3, 3),
           "plain_loop_ms": round(loop_s * 1e3, 3) if loop_s else None,
           "compile_s": round(c.get("compile_s", 0.0), 2) if c else None,
           "frames_compiled": c.get("frames_compiled"), "findings": c.get("findings"),
           "ops": len(rep.counts.records), "diagnose_s": round(d["diagnose_s"], 1),
           "state_warnings": d["state"]["warnings"],
           "top_ops": [(r["name"][:40], r["bound"], round(r["time_s"] * 1e3, 3))
                       for r in d["budget"]["per_op"][:4]]}
    if loop_s:
        out["t_wall_vs_loop"] = round(d["timing"]["median_s"] / loop_s, 3)
    print(json.dumps(out), flush=True)
    return out


def main() -> None:
    rows = []
    for name, build in (("gpt2 8x512", gpt2), ("resnet50 b64", resnet50)):
        with torch.no_grad():
            model, args = build()
            rows.append(row(f"{name} eager", gobrrr.diagnose(model, *args, time_budget_s=0.5),
                            plain_loop_s(model, args)))
            for mode in ("default", "reduce-overhead"):
                torch._dynamo.reset()
                cm = torch.compile(model, mode=None if mode == "default" else mode)
                fresh = gobrrr.diagnose(cm, *args, time_budget_s=0.5)
                rows.append(row(f"{name} compiled {mode} fresh", fresh, None))
                warm = gobrrr.diagnose(cm, *args, time_budget_s=0.5)
                rows.append(row(f"{name} compiled {mode} warm", warm, plain_loop_s(cm, args)))
        del model
        torch._dynamo.reset()
        torch.cuda.empty_cache()
    with open(sys.argv[1], "w") as fh:
        json.dump({"torch": torch.__version__, "gpu": torch.cuda.get_device_name(0),
                   "rows": rows}, fh, indent=1)


if __name__ == "__main__":
    main()
