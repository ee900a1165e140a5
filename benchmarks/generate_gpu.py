"""Generation read as prefill and decode (gobrrr.generation) on the published configs
with random weights: GPT-2 small and TinyLlama-1.1B, batch 1 and 8, a 128-token prompt,
64 new tokens, greedy; plain `generate` and `cache_implementation="static"` (which
transformers compiles). Each row: prefill time, decode tokens/s, the bytes a decode step
reads, the bandwidth bound at calibrate's measured bandwidth and the fraction of it
reached (MBU); prefill's FLOPs and MFU against calibrate's peak. Writes one JSON list.

  python benchmarks/generate_gpu.py --out results.json [--device cuda] [--tiny]

--tiny: 2-layer versions of the same configs (a CPU smoke run of this script).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch

from gobrrr.generation import profile_generation
from gobrrr.hardware import calibrate
from gobrrr.model_configs import hf_config

TINY = {"gpt2": {"n_layer": 2, "n_embd": 64, "n_head": 4},
        "tinyllama-1.1b": {"num_hidden_layers": 2, "hidden_size": 64,
                           "intermediate_size": 128, "num_attention_heads": 4,
                           "num_key_value_heads": 2}}


def build(name: str, device: str, dtype: torch.dtype, tiny: bool) -> torch.nn.Module:
    import transformers

    entry = hf_config(name)
    assert entry is not None, name
    fields = dict(entry.fields, **(TINY[name] if tiny else {}))
    cfg = transformers.AutoConfig.for_model(entry.model_type, **fields)
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(cfg, dtype=dtype)
    return model.to(device).eval()


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--out", required=True)
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--tiny", action="store_true")
    p.add_argument("--prompt", type=int, default=128)
    p.add_argument("--new", type=int, default=64)
    a = p.parse_args()
    dtype = torch.bfloat16 if a.device == "cuda" else torch.float32
    ceil = calibrate(a.device, progress=lambda m: print(m, file=sys.stderr))
    bw = ceil.bandwidth_bytes_per_s
    peak = ceil.peak_flops_per_s["bf16" if dtype == torch.bfloat16 else "fp32"]
    rows = []
    for name in ("gpt2", "tinyllama-1.1b"):
        model = build(name, a.device, dtype, a.tiny)
        vocab = model.config.vocab_size
        for batch in (1, 8):
            ids = torch.randint(1, vocab, (batch, a.prompt), device=a.device)
            for cache in ("dynamic", "static"):
                kw = {"pad_token_id": 0}
                if cache == "static":
                    kw["cache_implementation"] = "static"
                t0 = time.perf_counter()
                try:
                    prof = profile_generation(model, ids, a.new, warmup=2,
                                              bandwidth_bytes_per_s=bw,
                                              peak_flops_per_s=peak, **kw)
                except Exception as exc:  # a row that fails says why; the others run
                    rows.append({"workload": name, "batch": batch, "cache": cache,
                                 "error": f"{type(exc).__name__}: {exc}"[:500]})
                    continue
                row = {"workload": name, "batch": batch, "cache": cache,
                       "dtype": str(dtype), "measure_s": time.perf_counter() - t0,
                       **prof.to_dict()}
                rows.append(row)
                print(f"{name} b{batch} {cache}: {prof.summary()}", flush=True)
        del model
    Path(a.out).write_text(json.dumps({"device": a.device, "torch": torch.__version__,
                                       "bandwidth_bytes_per_s": bw, "rows": rows},
                                      indent=2))


if __name__ == "__main__":
    main()
