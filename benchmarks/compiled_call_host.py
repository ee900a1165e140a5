"""What does a call of torch.compile(mode="reduce-overhead")'s wrapper cost the host,
beside a plain CUDA graph replay of the same model? (GPU machine; issue 24.)

On an H100 (session ad) GPT-2 1x1 cast to bf16 under inference_mode measured 11.99x as a
plain captured CUDA graph and 8.96x under torch.compile(mode="reduce-overhead") (the hand
search's same stack: 8.68x); gobrrr predicted 14.04x and 17.18x. The compiled call does
host work a plain replay does not (dynamo's guards, the AOT wrapper, CUDA graph trees'
checks of its static inputs, building HF's output object), and the prediction has no
term for it. This measures it, per model:

- `eager_us`, `graph_us`, `compiled_us`: synchronised per-call medians (eager; one
  `torch.cuda.CUDAGraph` replay with inputs copied in; the compiled function);
- `graph_issue_us`, `compiled_issue_us`: the host's time to issue one call, from N calls
  issued back to back with one sync at the end (the GPU runs behind: this is the host's
  cost per call, not the GPU's);
- `tensors`: the module's parameters and buffers (the inputs a compiled graph guards).

    python benchmarks/compiled_call_host.py [--models gpt2_1x1 resnet50_b1] [--out F]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

N_TIMED = 200
N_ISSUED = 100


def _model(name: str) -> tuple[Any, Any]:
    import torch

    if name == "gpt2_1x1":
        from transformers import GPT2Config, GPT2LMHeadModel

        m = GPT2LMHeadModel(GPT2Config()).eval().cuda().to(torch.bfloat16)
        return m, torch.randint(0, 50257, (1, 1), device="cuda")
    if name == "resnet50_b1":
        import torchvision

        m = torchvision.models.resnet50().eval().cuda().to(torch.bfloat16)
        return (m.to(memory_format=torch.channels_last),
                torch.randn(1, 3, 224, 224, device="cuda", dtype=torch.bfloat16))
    raise SystemExit(f"unknown model {name}")


def _first(out: Any) -> Any:
    """The first tensor of a model's output (HF returns an object with .logits)."""
    return getattr(out, "logits", out)


def _synced_us(call: Callable[[], Any]) -> float:
    import torch

    times = []
    for _ in range(N_TIMED):
        a = time.perf_counter()
        call()
        torch.cuda.synchronize()
        times.append(time.perf_counter() - a)
    return statistics.median(times) * 1e6


def _issue_us(call: Callable[[], Any]) -> float:
    """Host time per call with the GPU left running behind: the median of 5 bursts."""
    import torch

    bursts = []
    for _ in range(5):
        torch.cuda.synchronize()
        a = time.perf_counter()
        for _ in range(N_ISSUED):
            call()
        bursts.append((time.perf_counter() - a) / N_ISSUED)
        torch.cuda.synchronize()
    return statistics.median(bursts) * 1e6


def one(name: str) -> dict[str, Any]:
    import torch

    model, x = _model(name)
    tensors = sum(1 for _ in model.parameters()) + sum(1 for _ in model.buffers())
    with torch.inference_mode():
        def eager() -> Any:
            return _first(model(x))

        for _ in range(10):
            eager()
        row: dict[str, Any] = {"model": name, "tensors": tensors,
                               "eager_us": _synced_us(eager)}

        static_x = x.clone()
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            for _ in range(3):
                _first(model(static_x))
        torch.cuda.current_stream().wait_stream(s)
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            _first(model(static_x))

        def replay() -> None:
            static_x.copy_(x)
            g.replay()

        row["graph_us"] = _synced_us(replay)
        row["graph_issue_us"] = _issue_us(replay)

        compiled = torch.compile(model, mode="reduce-overhead")
        t = time.perf_counter()
        for _ in range(3):
            _first(compiled(x))
        torch.cuda.synchronize()
        row["compile_s"] = round(time.perf_counter() - t, 1)

        def comp() -> Any:
            return _first(compiled(x))

        row["compiled_us"] = _synced_us(comp)
        row["compiled_issue_us"] = _issue_us(comp)
    row = {k: round(v, 1) if isinstance(v, float) else v for k, v in row.items()}
    row["wrapper_host_us"] = round(row["compiled_issue_us"] - row["graph_issue_us"], 1)
    row["wrapper_us_per_tensor"] = round(row["wrapper_host_us"] / tensors, 3)
    print(json.dumps(row), flush=True)
    return row


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--models", nargs="+", default=["gpt2_1x1", "resnet50_b1"])
    ap.add_argument("--out", type=Path, default=None)
    o = ap.parse_args()
    import torch

    rows = [one(m) for m in o.models]
    res = {"device": torch.cuda.get_device_name(), "torch": torch.__version__,
           "rows": rows}
    if o.out:
        o.out.write_text(json.dumps(res, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
