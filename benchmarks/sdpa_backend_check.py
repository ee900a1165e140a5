"""Does the lean loop's `attention=` reach the kernels? A 2-layer LLaMA-style config on
CUDA, bf16: the lean loop in eager and compile modes with attention None and "math", one
profiled generation of 4 tokens each; prints the SDPA-like kernels each ran.

  python benchmarks/sdpa_backend_check.py
"""

from __future__ import annotations

import torch
from torch.profiler import ProfilerActivity, profile
from transformers import LlamaConfig, LlamaForCausalLM

from gobrrr.generation_lean import LeanDecoder

cfg = LlamaConfig(vocab_size=1000, hidden_size=256, intermediate_size=512,
                  num_hidden_layers=2, num_attention_heads=8, num_key_value_heads=2)
model = LlamaForCausalLM(cfg).to("cuda", torch.bfloat16).eval()
ids = torch.randint(1, 1000, (1, 16), device="cuda")
for mode in ("eager", "compile"):
    for attention in (None, "math"):
        torch._dynamo.reset()
        dec = LeanDecoder(model, batch=1, max_len=32, mode=mode, attention=attention)
        dec.generate(ids, 4)
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            dec.generate(ids, 4)
            torch.cuda.synchronize()
        names = sorted({e.name[:90] for e in prof.events() if e.device_type.name == "CUDA"})
        sdpa = [n for n in names if any(s in n.lower() for s in
                                        ("sdpa", "attention", "fmha", "flash", "softmax"))]
        print(f"{mode} attention={attention}: {len(names)} kernel names; SDPA-like: {sdpa}",
              flush=True)
