"""Which form of a batch-1 matrix-vector product reads its weight fastest under Inductor
(issue 21: the lean decode step of TinyLlama-1.1B runs its 23 MB down projection at
~1.6 TB/s, its 46 MB gate/up at ~2.5 TB/s, against ~4.3 TB/s measured).

For each weight shape of a TinyLlama layer (N outputs x K inputs, bf16), a chain of 22
products with 22 distinct weights (one per layer, 22 x the weight's bytes, far more than
the L2), each product's input made from the one before by a pointwise step that Inductor
fuses into the next kernel (as the model's norm or SiLU is). Forms:
- `cublas`: F.linear eager (cuBLAS GEMV), the chain captured in a CUDA graph;
- `cd`: torch.compile with coordinate-descent tuning, under which Inductor decomposes a
  one-row mm into a multiply-and-sum reduction (the lean loop's setting);
- `splitS`: the same reduction written split-K by hand: the K inputs in S slices, a
  reduction over K/S per (output, slice) in float32, then a sum over the S slices.
The compiled chains are captured in a CUDA graph too. Time: CUDA events around 20
replays, median of 5, per product; bandwidth = the weight's bytes / that time.

  python benchmarks/gemv_forms_gpu.py --out F.json
"""

from __future__ import annotations

import argparse
import json
import statistics

import torch
import torch._inductor.config as inductor_config
import torch.nn.functional as F

LAYERS = 22
SHAPES = {"down": (2048, 5632), "q_o": (2048, 2048), "gate_up": (11264, 2048),
          "k_v": (256, 2048)}


def splitk(x: torch.Tensor, w: torch.Tensor, s: int) -> torch.Tensor:
    n, k = w.shape
    part = (x.float().view(1, 1, s, k // s) * w.float().view(1, n, s, k // s)).sum(-1)
    return part.sum(-1).to(x.dtype)


def chain(form: str, xs: list[torch.Tensor], ws: list[torch.Tensor]) -> torch.Tensor:
    y = None
    for x, w in zip(xs, ws, strict=True):
        if y is not None:  # a dependency on the product before, fused as a prologue
            x = x * torch.sigmoid(y[:, :1])
        y = splitk(x, w, int(form[5:])) if form.startswith("split") else F.linear(x, w)
    return y


def time_graph(fn) -> float:
    torch.cuda.synchronize()
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(3):
            fn()
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        fn()
    out = []
    for _ in range(5):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        for _ in range(20):
            g.replay()
        b.record()
        torch.cuda.synchronize()
        out.append(a.elapsed_time(b) / 1e3 / 20)
    return statistics.median(out)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--out", required=True)
    p.add_argument("--forms", default="cublas,cd,split2,split4,split8")
    a = p.parse_args()
    rows = []
    for shape, (n, k) in SHAPES.items():
        ws = [torch.randn(n, k, device="cuda", dtype=torch.bfloat16) * 0.02
              for _ in range(LAYERS)]
        xs = [torch.randn(1, k, device="cuda", dtype=torch.bfloat16) for _ in range(LAYERS)]
        ref = chain("cublas", xs, ws).float()
        for form in a.forms.split(","):
            torch._dynamo.reset()
            r = {"shape": shape, "n": n, "k": k, "form": form}
            try:
                if form == "cublas":
                    fn = lambda xs=xs, ws=ws: chain("cublas", xs, ws)  # noqa: E731
                else:
                    with inductor_config.patch(coordinate_descent_tuning=True):
                        c = torch.compile(lambda f=form, xs=xs, ws=ws: chain(f, xs, ws),
                                          dynamic=False)
                        c()
                    fn = c
                with torch.inference_mode():
                    got = fn().float()
                r["max_rel_err"] = float((got - ref).abs().max() / ref.abs().max())
                t = time_graph(fn)
                r["us_per_product"] = t / LAYERS * 1e6
                r["tb_per_s"] = n * k * 2 / (t / LAYERS) / 1e12
            except Exception as exc:
                r["error"] = f"{type(exc).__name__}: {str(exc).splitlines()[0][:300]}"
            print({kk: (round(v, 3) if isinstance(v, float) else v) for kk, v in r.items()},
                  flush=True)
            rows.append(r)
            json.dump(rows, open(a.out, "w"), indent=1)


if __name__ == "__main__":
    main()
