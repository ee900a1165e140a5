"""gobrrr's fusion estimate against Inductor's own byte count, on real models (issue 24's
compile predictions).

torch.compile's predicted gain from fusion (remedies/savings.fusion) scales the
memory-bound time of the fusable ops by the bytes their fusion leaves
(fusion_estimate.fusable_bytes_saved); every other op's time stays. By bytes, that
predicts the kernels Inductor generates to move (fusion_estimate.generated_bytes):
    (fusable ops' bytes - saved) + the bytes of the other non-extern ops (copies,
    scatters, embedding backward, ...)
This compiles the same workload (a `gobrrr` target, built from its config with random
weights, as `gobrrr optimize` builds it) with Inductor's default mode and reads the read
+ write bytes of each scheduled node (inductor_bytes.py), its generated kernels apart
from extern calls (GEMMs, convolutions, attention). Prints one JSON line per target: the
eager bytes by op class, the estimate and Inductor's count.

    python benchmarks/fusion_bytes_check.py TARGET [--batch N] [--seq-len N] [--train]
        [--device cpu|cuda] [--nodes N]

On a CPU Inductor's C++ backend schedules the same buffers as on a GPU, mostly: its
kernels are not Triton's, so a CPU row is a check of the estimate, not the H200's figure.
"""

from __future__ import annotations

import argparse
import json
import time
from collections import Counter


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("target")
    p.add_argument("--batch", type=int, default=None)
    p.add_argument("--seq-len", type=int, default=None)
    p.add_argument("--train", action="store_true")
    p.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    p.add_argument("--nodes", type=int, default=0,
                   help="also list the N scheduled nodes that move the most bytes")
    a = p.parse_args()
    t0 = time.perf_counter()

    import torch
    from inductor_bytes import counting

    from gobrrr.counting import count
    from gobrrr.fusion_estimate import fusable_bytes_saved, generated_bytes
    from gobrrr.models import ModelOptions
    from gobrrr.targets import load_target

    w = load_target(a.target, a.device, a.batch,
                    ModelOptions(seq_len=a.seq_len, train=a.train))
    # one call first, as doctor warms up before it counts: a training step's first call
    # also creates the optimizer's state (AdamW's zeros_like: 2 GB on GPT-2), which no
    # later step, and no compiled one, does
    w.fn(*w.args, **w.kwargs)
    records = count(w.fn, *w.args, **w.kwargs).records
    by_class: Counter[str] = Counter()
    for r in records:
        by_class[r.op_class] += r.bytes
    saved, fusable = fusable_bytes_saved(records)
    estimate = generated_bytes(records)
    unfused = estimate - (fusable - saved)

    t1 = time.perf_counter()
    nodes: list[tuple[str, int, str]] = []
    with counting(nodes if a.nodes else None) as graphs:
        torch.compile(w.fn)(*w.args, **w.kwargs)
    compile_s = time.perf_counter() - t1
    total: Counter[str] = Counter()
    for g in graphs:
        total.update(g)
    gen = total["generated"]
    print(json.dumps({
        "target": a.target, "batch": a.batch, "seq_len": a.seq_len, "train": a.train,
        "device": a.device, "torch": torch.__version__,
        "eager_bytes_by_class": dict(by_class),
        "fusable_bytes": fusable, "fusion_saved_bytes": saved, "unfused_other_bytes": unfused,
        "estimate_generated_bytes": estimate,
        "inductor_graphs": len(graphs), "inductor_bytes_by_kind": dict(total),
        "inductor_bytes_by_graph": [dict(g) for g in graphs],
        "estimate_over_inductor": round(estimate / gen, 3) if gen else None,
        "top_nodes": [list(n) for n in sorted(nodes, key=lambda n: -n[1])[:a.nodes]],
        "compile_s": round(compile_s, 1), "seconds": round(time.perf_counter() - t0, 1)}),
        flush=True)


if __name__ == "__main__":
    main()
