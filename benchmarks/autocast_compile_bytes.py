"""Bytes a compiled GPT-2 forward + backward moves, in fp32 and under bf16 autocast, by
Inductor's own count, beside gobrrr's eager estimates (issue 24: the training row's
compile on top of fused AdamW + bf16 autocast + CUDA graphs was predicted 1.25-1.50x and
measured 1.83-1.89x on the H200; is the memory traffic autocast leaves under compile
what the prediction assumes?).

The prediction (remedies/precision.py) credits bf16 autocast under torch.compile with its
matmul time only: the casts fuse into their neighbours and the compile's fusion is
counted from the fp32 bytes (fusion_estimate.fusable_bytes_saved). This measures, for one fp32
fwd+bwd of GPT-2 (random weights, dropout 0.1 as GPT-2's config has it):
  eager      gobrrr's counted bytes by op class, the fusion estimate (bytes a perfect
             fusion saves of the fusable ops' bytes), and autocast_flow's ops whose every
             input would be bf16 and the casts autocast adds;
  compiled   Inductor's scheduler nodes' read + write bytes (inductor_bytes.py), its
             generated kernels apart from extern calls (GEMMs, attention), for the step
             compiled in fp32 and compiled under bf16 autocast (forward graph and the
             backward graph AOTAutograd makes).

    python benchmarks/autocast_compile_bytes.py [--device cpu|cuda] [--layers 2]
        [--batch 8] [--seq 256]

Prints one JSON object. CPU autocast's op lists differ from CUDA's (more ops kept in
fp32), so a CPU run is not the H200's answer; run it there with --device cuda.
"""

from __future__ import annotations

import argparse
import json
from collections import Counter
from typing import Any


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--seq", type=int, default=256)
    a = p.parse_args()

    import torch
    from inductor_bytes import counting
    from transformers import GPT2Config, GPT2LMHeadModel

    from gobrrr.counting import count
    from gobrrr.fusion_estimate import fusable_bytes_saved, is_fusable
    from gobrrr.remedies.autocast_flow import autocast_flow
    from gobrrr.remedies.base import workload_facts

    torch.manual_seed(0)
    model = GPT2LMHeadModel(GPT2Config(n_layer=a.layers, attn_implementation="sdpa",
                                       use_cache=False)).to(a.device).train()
    ids = torch.randint(0, model.config.vocab_size, (a.batch, a.seq), device=a.device)

    def loss_of(t: torch.Tensor) -> torch.Tensor:
        return model(input_ids=t, labels=t).loss

    def fwd_bwd(t: torch.Tensor) -> None:
        loss_of(t).backward()

    records = count(fwd_bwd, ids).records
    model.zero_grad(set_to_none=True)
    by_class: Counter[str] = Counter()
    for r in records:
        by_class[r.op_class] += r.bytes
    saved, fusable = fusable_bytes_saved(records)
    flow = autocast_flow(records, workload_facts([model], [])["param_storages"])
    out: dict[str, Any] = {
        "device": a.device, "torch": torch.__version__, "layers": a.layers,
        "tokens": a.batch * a.seq,
        "eager": {
            "bytes_by_class": dict(by_class), "fusable_bytes": fusable,
            "fusion_saved_bytes": saved,
            "fusion_left_bytes": fusable - saved,
            "bf16_input_op_bytes": sum(r.bytes for r in records if r.index in flow.halved),
            "bf16_input_fusable_bytes": sum(r.bytes for r in records if r.index in flow.halved
                                            and is_fusable(r)),
            "casts": flow.casts, "cast_bytes": sum(flow.cast_bytes)}}

    for name, autocast in (("fp32", False), ("bf16_autocast", True)):
        torch._dynamo.reset()
        with counting() as graphs:
            compiled = torch.compile(loss_of)
            with torch.autocast(a.device, dtype=torch.bfloat16, enabled=autocast):
                loss = compiled(ids)
            loss.backward()
        model.zero_grad(set_to_none=True)
        kinds: Counter[str] = Counter()
        for g in graphs:
            kinds.update(g)
        out[f"compiled_{name}"] = {"graphs": len(graphs), "bytes_by_kind": dict(kinds)}
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
