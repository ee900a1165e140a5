"""The lean decode loop (gobrrr.generation_lean) beside HF `generate`, on published decoder
configs with random weights: tokens/s of plain generate, generate with the static cache
(which transformers compiles on CUDA), and the lean loop eager, with its decode step in a
CUDA graph, and compiled (reduce-overhead). Each arm: one warm-up (its seconds, a capture
or compile included, are prep_s), then REPEATS timed generations, synchronised at their
ends; tokens/s = batch x new tokens over the median. Logits of each arm along plain
generate's greedy sequence (teacher-forced) against plain generate's: rel_err, top-1.

  python benchmarks/lean_gpu.py --out F.json [--models gpt2,tinyllama-1.1b] [--batches 1,8]
      [--dtype bf16] [--budget-s 540] [--tiny]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time

import torch

from gobrrr.generation import decode_bytes
from gobrrr.generation_lean import LeanDecoder
from gobrrr.generation_optimize import compare_logits, teacher_forced_logits
from gobrrr.hardware import calibrate
from gobrrr.model_configs import hf_config

REPEATS = 3
TINY = {"gpt2": {"n_layer": 2, "n_embd": 64, "n_head": 4},
        "tinyllama-1.1b": {"num_hidden_layers": 2, "hidden_size": 64,
                           "intermediate_size": 128, "num_attention_heads": 4,
                           "num_key_value_heads": 2},
        "qwen2.5-0.5b": {"num_hidden_layers": 2, "hidden_size": 64,
                         "intermediate_size": 128, "num_attention_heads": 4,
                         "num_key_value_heads": 2, "vocab_size": 1000}}


def build(name: str, device: str, dtype: torch.dtype, tiny: bool) -> torch.nn.Module:
    import transformers

    entry = hf_config(name)
    assert entry is not None, name
    fields = dict(entry.fields, **(TINY[name] if tiny else {}))
    cfg = transformers.AutoConfig.for_model(entry.model_type, **fields)
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(cfg, dtype=dtype)
    return model.to(device).eval()


def timed(run, sync) -> float:
    sync()
    t0 = time.perf_counter()
    run()
    sync()
    return time.perf_counter() - t0


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--out", required=True)
    p.add_argument("--models", default="gpt2,tinyllama-1.1b,qwen2.5-0.5b")
    p.add_argument("--batches", default="1,8")
    p.add_argument("--dtype", default="bf16")
    p.add_argument("--prompt", type=int, default=128)
    p.add_argument("--new", type=int, default=64)
    p.add_argument("--budget-s", type=float, default=540)
    p.add_argument("--tiny", action="store_true")
    a = p.parse_args()
    t_start = time.perf_counter()
    device = "cuda" if torch.cuda.is_available() else "cpu"
    dtype = {"bf16": torch.bfloat16, "fp32": torch.float32}[a.dtype]
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    ceil = calibrate(device, progress=lambda m: print(m, file=sys.stderr))
    bw = ceil.bandwidth_bytes_per_s
    rows = []
    kw = {"max_new_tokens": a.new, "min_new_tokens": a.new, "do_sample": False,
          "pad_token_id": 0}
    for name in a.models.split(","):
        model = build(name, device, dtype, a.tiny)
        db = decode_bytes(model)
        for b in map(int, a.batches.split(",")):
            if time.perf_counter() - t_start > a.budget_s:
                print(f"budget spent: {name} b{b} not run", flush=True)
                continue
            torch.manual_seed(1)
            ids = torch.randint(0, model.config.vocab_size, (b, a.prompt), device=device)
            mean_bytes = statistics.mean(db.step_bytes(b, a.prompt + k)
                                         for k in range(1, a.new))
            row = {"workload": name, "batch": b, "dtype": a.dtype, "prompt": a.prompt,
                   "new_tokens": a.new, "bound_tokens_per_s": b * bw / mean_bytes,
                   "arms": {}}
            with torch.inference_mode():
                ref = model.generate(ids, output_logits=True, return_dict_in_generate=True,
                                     **kw)
            ref_logits = torch.stack([t.float().cpu() for t in ref.logits])
            arms = {
                "generate": lambda m=model, i=ids: m.generate(i, **kw),
                "generate static": lambda m=model, i=ids: m.generate(
                    i, cache_implementation="static", **kw),
            }
            for mode in ("eager", "graph", "compile"):
                if mode != "eager" and device != "cuda":
                    continue
                arms[f"lean {mode}"] = mode
            for arm, run in arms.items():
                if time.perf_counter() - t_start > a.budget_s:
                    row["arms"][arm] = {"error": "budget spent"}
                    continue
                r: dict = {}
                try:
                    dec = None
                    if isinstance(run, str):
                        dec = LeanDecoder(model, batch=b, max_len=a.prompt + a.new, mode=run)
                        def run(d=dec, i=ids):
                            return d.generate(i, a.new)
                    with torch.inference_mode():
                        r["prep_s"] = timed(run, sync)
                        secs = [timed(run, sync) for _ in range(REPEATS)]
                    r["seconds"] = secs
                    r["tokens_per_s"] = b * a.new / statistics.median(secs)
                    r["of_bound"] = r["tokens_per_s"] / row["bound_tokens_per_s"]
                    if dec is not None:
                        seq, got = dec.generate(ids, a.new, force=ref.sequences)
                        r["own_tokens_equal_generate"] = bool(
                            torch.equal(dec.generate(ids, a.new)[0], ref.sequences))
                    elif arm == "generate static":
                        got = teacher_forced_logits(model, ids, ref.sequences, a.new,
                                                    cache_implementation="static")
                    else:
                        got = None
                    if got is not None:
                        r["rel_err"], r["top1"], r["exact"] = compare_logits(ref_logits, got)
                except Exception as exc:
                    r["error"] = f"{type(exc).__name__}: {str(exc).splitlines()[0][:300]}"
                finally:
                    dec = None
                    torch.cuda.empty_cache() if device == "cuda" else None
                row["arms"][arm] = r
                print(name, b, arm, {k: (round(v, 4) if isinstance(v, float) else v)
                                     for k, v in r.items() if k != "seconds"}, flush=True)
            rows.append(row)
        del model
        torch.cuda.empty_cache() if device == "cuda" else None
    json.dump({"device": torch.cuda.get_device_name() if device == "cuda" else "cpu",
               "torch": torch.__version__, "bandwidth_bytes_per_s": bw, "rows": rows},
              open(a.out, "w"), indent=1)


if __name__ == "__main__":
    main()
