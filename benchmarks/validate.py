"""Validation suite: gobrrr's verdict and fractions against ground truth on a GPU.

Ground truth per case:
- overhead = 1 - T_graph_replay / T_eager: CUDA-graph replay runs the same kernels with the
  CPU out of the way (timed here with CUDA events, independently of gobrrr's timer);
- the rest splits into memory and compute by ncu's hardware counters per kernel: a kernel
  is memory-bound when its DRAM throughput (% of peak) is at least its SM and tensor-pipe
  throughput (% of peak), compute-bound otherwise; shares weighted by kernel duration.

Usage (on the GPU machine; benchmarks/gpu_check.sh runs all three):
  python3 benchmarks/validate.py run OUT_DIR        # gobrrr + graph replay per case
  ncu --clock-control none --profile-from-start off --csv --metrics ... \\
      python3 benchmarks/validate.py ncu-target      # one call per case, delimited
  python3 benchmarks/validate.py compare OUT_DIR    # join into validation.json / .md
Each case is also a gobrrr target: `gobrrr doctor benchmarks/validate.py:gpt2_large`.
"""

from __future__ import annotations

import csv
import json
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

DEV = "cuda"
# ncu metrics: DRAM vs SM vs tensor-pipe utilisation, and the kernel's duration.
METRICS = ("dram__throughput.avg.pct_of_peak_sustained_elapsed,"
           "sm__throughput.avg.pct_of_peak_sustained_elapsed,"
           "sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active,"
           "gpu__time_duration.sum")


def _randn(*shape: int, dtype: Any = None) -> Any:
    import torch

    return torch.randn(*shape, device=DEV, dtype=dtype or torch.float32)


def _nograd(f: Callable[..., Any]) -> Callable[..., Any]:
    import torch

    def g(*a: Any) -> Any:
        with torch.no_grad():
            return f(*a)

    return g


def elementwise(n: int) -> tuple:
    return (lambda x: x.cos()), (_randn(n),)


def pointwise_chain(n: int) -> tuple:
    return (lambda x: x.cos().mul(1.5).sin().add(0.5)), (_randn(n),)


def layernorm(rows: int) -> tuple:
    import torch.nn.functional as F

    return (lambda x: F.layer_norm(x, (4096,))), (_randn(rows, 4096),)


def softmax(rows: int) -> tuple:
    return (lambda x: x.softmax(-1)), (_randn(rows, 4096),)


def reduction(rows: int) -> tuple:
    return (lambda x: x.sum(-1)), (_randn(rows, 4096),)


def matmul_bf16(m: int) -> tuple:
    import torch

    return torch.mm, (_randn(m, 8192, dtype=torch.bfloat16),
                      _randn(8192, 8192, dtype=torch.bfloat16))


def matmul_fp32(m: int) -> tuple:
    import torch

    torch.backends.cuda.matmul.allow_tf32 = False  # plain fp32 units (the default)
    return torch.mm, (_randn(m, 4096), _randn(4096, 4096))


def attention(batch: int) -> tuple:
    import torch
    import torch.nn.functional as F

    q, k, v = (_randn(batch, 16, 1024, 64, dtype=torch.bfloat16) for _ in range(3))
    return (lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True)), (q, k, v)


def mlp(batch: int) -> tuple:
    from gobrrr.examples import mlp as _mlp

    return _mlp(batch, DEV)


def mlp_train(batch: int) -> tuple:
    """Training step with Adam(capturable=True), so graph replay gives ground truth."""
    import torch

    from gobrrr.examples import _mlp_module

    model = _mlp_module(512, 4, DEV)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3, capturable=True)
    x, y = _randn(batch, 512), _randn(batch, 512)

    def step(x: Any, y: Any) -> Any:
        opt.zero_grad(set_to_none=False)  # grads stay allocated: capturable across calls
        torch.nn.functional.mse_loss(model(x), y).backward()
        opt.step()

    return step, (x, y)


def resnet50(batch: int) -> tuple:
    import torch
    import torchvision

    torch.manual_seed(0)
    model = torchvision.models.resnet50().to(DEV).eval()
    return _nograd(model), (_randn(batch, 3, 224, 224),)


def gpt2(batch: int, seq: int = 64) -> tuple:
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    model = GPT2LMHeadModel(GPT2Config()).to(DEV).eval()
    ids = torch.randint(0, 50257, (batch, seq), device=DEV)
    return _nograd(lambda i: model(input_ids=i).logits), (ids,)


def gpt2_large(batch_size: int = 8) -> tuple:
    """GPT-2 small inference at batch 8 x 512 tokens (the doctor speed target)."""
    return gpt2(batch_size, 512)


# name -> (factory, small batch, large batch)
CASES: dict[str, tuple[Callable[..., tuple], int, int]] = {
    "elementwise_cos": (elementwise, 2**16, 2**28),
    "pointwise_chain": (pointwise_chain, 2**16, 2**27),
    "layernorm": (layernorm, 8, 65536),
    "softmax": (softmax, 8, 65536),
    "reduction_sum": (reduction, 8, 65536),
    "matmul_bf16": (matmul_bf16, 16, 8192),
    "matmul_fp32": (matmul_fp32, 16, 8192),
    "attention_sdpa_bf16": (attention, 1, 32),
    "mlp_infer": (mlp, 16, 16384),
    "mlp_train_adam": (mlp_train, 16, 8192),
    "resnet50_infer": (resnet50, 1, 64),
    "gpt2_infer": (gpt2, 1, 16),
}


def all_cases() -> list[tuple[str, Callable[..., tuple], int]]:
    out = []
    for name, (factory, small, large) in CASES.items():
        out += [(f"{name}@{small}", factory, small), (f"{name}@{large}", factory, large)]
    return out


def _graph_truth(fn: Callable[..., Any], args: tuple) -> dict[str, Any]:
    """T_eager and T_replay with CUDA events over 50-call loops, median of 5."""
    import statistics

    import torch

    def loop_ms(f: Callable[[], Any], n: int = 50) -> float:
        samples = []
        for _ in range(5):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            for _ in range(n):
                f()
            end.record()
            torch.cuda.synchronize()
            samples.append(start.elapsed_time(end) / n)
        return statistics.median(samples)

    for _ in range(5):
        fn(*args)
    torch.cuda.synchronize()
    eager_ms = loop_ms(lambda: fn(*args))
    try:
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(3):
                fn(*args)
        torch.cuda.current_stream().wait_stream(side)
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            fn(*args)
        replay_ms = loop_ms(g.replay)
        del g
    except Exception as exc:
        torch.cuda.synchronize()
        return {"eager_s": eager_ms / 1e3, "replay_s": None, "capture_error": str(exc)[:200]}
    return {"eager_s": eager_ms / 1e3, "replay_s": replay_ms / 1e3}


def cmd_run(out_dir: Path, only: list[str]) -> None:
    import torch

    from gobrrr.api import diagnose_workload
    from gobrrr.workload import from_callable

    out_dir.mkdir(parents=True, exist_ok=True)
    results = {}
    for name, factory, batch in all_cases():
        if only and not any(o in name for o in only):
            continue
        t0 = time.perf_counter()
        fn, args = factory(batch)
        truth = _graph_truth(fn, args)
        w = from_callable(fn, args, name=name)
        w.factory, w.batch_size = (lambda b, f=factory: f(b)), batch
        report = diagnose_workload(w, time_budget_s=1.0)
        d = report.to_dict()
        results[name] = {
            "gobrrr": {"regime": d["regime"], "fractions": d["fractions"],
                       "evidence": d["verdict"]["evidence"],
                       "agreement": d["verdict"]["agreement"],
                       "wall_s": d["timing"]["median_s"], "busy_s": d["budget"]["busy_s"],
                       "diagnose_s": d["diagnose_s"], "notes": d["notes"],
                       "top_ops": [(r["name"], r["time_s"], r["bound"])
                                   for r in d["budget"]["per_op"][:5]]},
            "graph_truth": truth,
            "case_s": time.perf_counter() - t0,
        }
        print(f"{name}: gobrrr {d['regime']} "
              f"{ {k: round(v, 2) for k, v in d['fractions'].items()} } "
              f"truth replay {truth} in {time.perf_counter() - t0:.1f}s", flush=True)
        del fn, args, w, report
        torch.cuda.empty_cache()
    (out_dir / "gobrrr_runs.json").write_text(json.dumps(results, indent=1, default=str))


def cmd_ncu_target(only: list[str]) -> None:
    """One warmed call per case inside the profiled region, each preceded by a
    delimiter kernel (torch.cuda._sleep's spin_kernel) so the CSV can be split."""
    import torch

    for name, factory, batch in all_cases():
        if only and not any(o in name for o in only):
            continue
        fn, args = factory(batch)
        for _ in range(3):
            fn(*args)
        torch.cuda.synchronize()
        torch.cuda.cudart().cudaProfilerStart()
        torch.cuda._sleep(1000)
        fn(*args)
        torch.cuda.synchronize()
        torch.cuda.cudart().cudaProfilerStop()
        print(f"ncu-target {name}", flush=True)
        del fn, args
        torch.cuda.empty_cache()


def _parse_ncu(path: Path) -> list[dict[str, Any]]:
    """Kernels in launch order with their metrics (ncu --csv long format)."""
    lines = path.read_text(errors="replace").splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith('"ID"'))
    kernels: dict[str, dict[str, Any]] = {}
    for row in csv.DictReader(lines[start:]):
        k = kernels.setdefault(row["ID"], {"name": row["Kernel Name"], "m": {}})
        try:
            k["m"][row["Metric Name"]] = float(row["Metric Value"].replace(",", ""))
        except ValueError:
            pass
    return [kernels[i] for i in sorted(kernels, key=int)]


def cmd_compare(out_dir: Path) -> None:
    runs = json.loads((out_dir / "gobrrr_runs.json").read_text())
    kernels = _parse_ncu(out_dir / "ncu.csv")
    # Split the kernel list at the delimiters, in case order.
    groups: list[list[dict[str, Any]]] = []
    for k in kernels:
        if "spin_kernel" in k["name"]:
            groups.append([])
        elif groups:
            groups[-1].append(k)
    names = [n for n, _, _ in all_cases() if n in runs]
    rows = []
    for name, ks in zip(names, groups, strict=False):
        mem = comp = 0.0
        for k in ks:
            m = k["m"]
            dur = m.get("gpu__time_duration.sum", 0.0)
            dram = m.get("dram__throughput.avg.pct_of_peak_sustained_elapsed", 0.0)
            tensor = "sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active"
            sm = max(m.get("sm__throughput.avg.pct_of_peak_sustained_elapsed", 0.0),
                     m.get(tensor, 0.0))
            if dram >= sm:
                mem += dur
            else:
                comp += dur
        g = runs[name]
        truth = g["graph_truth"]
        if truth.get("replay_s"):
            overhead = max(0.0, 1 - truth["replay_s"] / truth["eager_s"])
        else:
            overhead = None
        busy = mem + comp
        gt = None
        if overhead is not None and busy > 0:
            gt = {"overhead": overhead, "memory": (1 - overhead) * mem / busy,
                  "compute": (1 - overhead) * comp / busy}
        ours = g["gobrrr"]["fractions"]
        row = {"case": name, "gobrrr_regime": g["gobrrr"]["regime"], "gobrrr": ours,
               "truth": gt, "kernels": len(ks),
               "truth_regime": max(gt, key=gt.get) if gt else None,
               "max_diff_points": (max(abs(ours[r] - gt[r]) for r in gt) * 100) if gt else None,
               "diagnose_s": g["gobrrr"]["diagnose_s"], "capture_error": truth.get("capture_error")}
        row["regime_ok"] = row["truth_regime"] == row["gobrrr_regime"] if gt else None
        rows.append(row)
    (out_dir / "validation.json").write_text(json.dumps(rows, indent=1))
    md = ["| case | gobrrr regime | truth regime | gobrrr o/m/c % | truth o/m/c % "
          "| max diff (pts) | kernels |", "|---|---|---|---|---|---|---|"]

    def fmt(f: dict[str, float] | None) -> str:
        keys = ("overhead", "memory", "compute")
        return "/".join(f"{100 * f[k]:.0f}" for k in keys) if f else "n/a"

    for r in rows:
        diff = f"{r['max_diff_points']:.0f}" if r["max_diff_points"] is not None else "n/a"
        md.append(f"| {r['case']} | {r['gobrrr_regime']} | {r['truth_regime']} | "
                  f"{fmt(r['gobrrr'])} | {fmt(r['truth'])} | {diff} | {r['kernels']} |")
    ok = [r for r in rows if r["regime_ok"] is not None]
    md.append("")
    md.append(f"regime right on {sum(r['regime_ok'] for r in ok)}/{len(ok)} cases with ground "
              f"truth; within 10 points on "
              f"{sum(r['max_diff_points'] <= 10 for r in ok)}/{len(ok)}")
    (out_dir / "validation.md").write_text("\n".join(md) + "\n")
    print("\n".join(md))


if __name__ == "__main__":
    cmd, rest = sys.argv[1], sys.argv[2:]
    if cmd == "run":
        cmd_run(Path(rest[0]), rest[1:])
    elif cmd == "ncu-target":
        cmd_ncu_target(rest)
    elif cmd == "compare":
        cmd_compare(Path(rest[0]))
    else:
        sys.exit(f"unknown command {cmd}")
