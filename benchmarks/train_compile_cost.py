"""Where the seconds of a training step's compile go (issue 24, GPU machine): one variant
per process, from a cold Inductor cache (the caller sets TORCHINDUCTOR_CACHE_DIR).

    python benchmarks/train_compile_cost.py {step|model|regional|eager} [--mode MODE]
        [--graph] [--plain] [--times]

The GPT-2 training step of the optimize table (hf:gpt2, batch 8, seq 256, AdamW) with
the optimizer fused and bf16 autocast, compiled as gobrrr's compile remedy does (`step`:
torch.compile of the whole step function: forward, backward and optimizer step) or as
the hand search does (`model`: torch.compile of the model, the step eager), or region by
region (`regional`: each block of the model's repeated ModuleList compiled on its own,
the rest eager: dynamo compiles one block's graph and reuses it for the other blocks, so
the cold compile should not grow with depth; PyTorch's "regional compilation" recipe).
`eager` times the same step uncompiled (fused AdamW, bf16 autocast); `--plain` leaves
the workload as given (fp32, the optimizer unfused: the optimize table's baseline).
`--graph` captures the whole step (compiled regions included) in one CUDA graph after
the warm calls, the optimizer capturable, and times its replays (session p: regional
compilation's fusion with the host work gone). `--nested` marks the repeated block
class's forward as `torch.compiler.nested_compile_region` before a `step` or `model`
compile (session s): the whole step is still one compile, but Inductor compiles the
block's graph once and stamps it out for every layer (hierarchical compilation, torch's
answer to regional compilation's lost fusion). Prints one JSON line: the seconds to
import, to build, of the first call and of three more (CUDA graph recording), and the
graphs dynamo compiled; `--times` also prints dynamo's compile-phase seconds.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import time

T0 = time.perf_counter()


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("what", choices=("step", "model", "regional", "eager"))
    p.add_argument("--mode", default="reduce-overhead")
    p.add_argument("--graph", action="store_true")
    p.add_argument("--plain", action="store_true")
    p.add_argument("--nested", action="store_true",
                   help="the repeated block class's forward as a nested compile region")
    p.add_argument("--times", action="store_true",
                   help="print dynamo's compile-phase seconds (compile_times) to stderr")
    a = p.parse_args()
    import torch
    import transformers  # noqa: F401 - its import time is part of a child's start

    from gobrrr.models import ModelOptions
    from gobrrr.targets import load_target
    t_import = time.perf_counter() - T0
    w = load_target("hf:gpt2", "cuda", 8, ModelOptions(seq_len=256, train=True))
    torch.cuda.synchronize()
    t_build = time.perf_counter() - T0 - t_import
    fn = w.fn
    cells = {type(c.cell_contents).__name__: c for c in fn.__closure__ or ()}
    for c in fn.__closure__ or ():
        obj = c.cell_contents
        if isinstance(obj, torch.optim.Optimizer) and not a.plain:
            for g in obj.param_groups:
                g["fused"], g["foreach"] = True, False
    if a.nested:
        for c in fn.__closure__ or ():
            if isinstance(c.cell_contents, torch.nn.Module):
                for mod in c.cell_contents.modules():
                    if isinstance(mod, torch.nn.ModuleList) and len(mod) > 1:
                        cls = type(mod[0])
                        cls.forward = torch.compiler.nested_compile_region(cls.forward)
                        break
    if a.what == "regional":
        for c in fn.__closure__ or ():
            if isinstance(c.cell_contents, torch.nn.Module):
                for mod in c.cell_contents.modules():
                    if isinstance(mod, torch.nn.ModuleList) and len(mod) > 1:
                        for block in mod:
                            block.compile(mode=a.mode)
    elif a.what == "eager":
        pass
    elif a.what == "model":
        for c in fn.__closure__ or ():
            if isinstance(c.cell_contents, torch.nn.Module):
                c.cell_contents = torch.compile(c.cell_contents, mode=a.mode)
    else:
        fn = torch.compile(fn, mode=a.mode)
    amp = (contextlib.nullcontext() if a.plain
           else torch.autocast("cuda", dtype=torch.bfloat16))
    t1 = time.perf_counter()
    with amp:
        first = fn(*w.args, **w.kwargs)
        # read now: a CUDA graph's output is overwritten by the next replay
        first = (float(first.float().mean()) if isinstance(first, torch.Tensor)
                 else repr(first)[:80])
        torch.cuda.synchronize()
        t_first = time.perf_counter() - t1
        for _ in range(3):
            fn(*w.args, **w.kwargs)
        torch.cuda.synchronize()
    t_more = time.perf_counter() - t1 - t_first
    if a.times:
        import sys

        from torch._dynamo.utils import compile_times
        print(compile_times(repr="str", aggregate=True), file=sys.stderr)
    capture_s = None
    call = fn
    if a.graph:
        from gobrrr.experiments import capture_cuda_graph
        from gobrrr.remedies.graphs import make_capturable
        make_capturable([c.cell_contents for c in fn.__closure__ or ()
                         if isinstance(c.cell_contents, torch.optim.Optimizer)])
        t3 = time.perf_counter()
        with amp:
            graph, _ = capture_cuda_graph(lambda: fn(*w.args, **w.kwargs))
        torch.cuda.synchronize()
        capture_s = round(time.perf_counter() - t3, 2)

        def call(*_args, **_kwargs):
            graph.replay()
    with amp:
        torch.cuda.synchronize()
        t2 = time.perf_counter()
        for _ in range(20):
            call(*w.args, **w.kwargs)
        torch.cuda.synchronize()
    step_ms = (time.perf_counter() - t2) / 20 * 1e3
    graphs = None
    with contextlib.suppress(Exception):
        from torch._dynamo.utils import counters
        graphs = int(counters["stats"]["unique_graphs"])
    print(json.dumps({"what": a.what, "mode": a.mode, "graph": a.graph, "plain": a.plain,
                      "nested": a.nested,
                      "capture_s": capture_s,
                      "total_s": round(time.perf_counter() - T0, 2),
                      "import_s": round(t_import, 2),
                      "build_s": round(t_build, 2), "first_call_s": round(t_first, 2),
                      "three_more_s": round(t_more, 2), "step_ms": round(step_ms, 3),
                      "graphs": graphs, "cells": sorted(cells),
                      "first_out": first}))


if __name__ == "__main__":
    main()
