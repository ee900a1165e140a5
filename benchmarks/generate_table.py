"""Issue 21, item 7: per decoder and batch, a hand search fixed in advance beside
`gobrrr optimize --generate`, and `gobrrr doctor --generate`'s time and report size.

Hand search (fixed before any run; each arm on the model as the user loads it, in
--dtype): plain generate; `cache_implementation="static"` (transformers compiles the
decode forward with reduce-overhead on CUDA: the static cache + compile arm); SDPA where
the config runs eager attention (these configs run SDPA already: not an arm); torchao's
int8 weight-only where torchao imports; a bf16 cast where --dtype is not bf16. Each arm
timed like gobrrr's A/B: one warm-up, then REPEATS rounds of (plain, arm), medians, the
tokens/s the median's. Then the CLI, as a user runs it: `gobrrr optimize hf:NAME
--generate N --batch-size B --seq-len P --dtype D --json` and `gobrrr doctor ... --json`.

Writes --out (a list of rows, the issue's keys plus each arm's figures) and --md (the
same as a table).

  python benchmarks/generate_table.py --out generate.json --md generate.md
      [--models tinyllama-1.1b] [--batches 1] [--dtype bf16] [--new 64] [--prompt 128]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import torch

from gobrrr.generation import decode_bytes
from gobrrr.hardware import calibrate
from gobrrr.model_configs import hf_config

REPEATS = 3


def build(name: str, device: str, dtype: torch.dtype) -> torch.nn.Module:
    import transformers

    entry = hf_config(name)
    assert entry is not None, name
    cfg = transformers.AutoConfig.for_model(entry.model_type, **entry.fields)
    torch.manual_seed(0)
    return transformers.AutoModelForCausalLM.from_config(cfg, dtype=dtype).to(device).eval()


def seconds(run, sync) -> float:
    with torch.inference_mode():
        sync()
        t0 = time.perf_counter()
        run()
        sync()
        return time.perf_counter() - t0


def hand_search(name: str, batch: int, dtype: torch.dtype, prompt: int, new: int,
                device: str) -> dict:
    import copy

    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    model = build(name, device, dtype)
    torch.manual_seed(1)
    ids = torch.randint(1, model.config.vocab_size, (batch, prompt), device=device)
    kw = {"max_new_tokens": new, "min_new_tokens": new, "do_sample": False,
          "pad_token_id": 0}

    def plain():
        return model.generate(ids, **kw)

    arms: dict[str, object] = {"static cache + compile": {"cache_implementation": "static"}}
    if dtype != torch.bfloat16:
        arms["bf16"] = "bf16"
        arms["bf16 + static cache + compile"] = "bf16 static"
    if getattr(model.config, "_attn_implementation", None) == "eager":
        arms["SDPA"] = "sdpa"
    if importlib.util.find_spec("torchao") is not None:
        arms["int8 weight-only"] = "int8"
    seconds(plain, sync)
    out = {"arms": {}}
    plain_all = []
    for arm, how in arms.items():
        r: dict = {}
        try:
            m, akw = model, dict(kw)
            if isinstance(how, dict):
                akw.update(how)
            else:
                m = copy.deepcopy(model)
                if "bf16" in how:
                    m = m.to(torch.bfloat16)
                if "static" in how:
                    akw["cache_implementation"] = "static"
                if how == "sdpa":
                    m.set_attn_implementation("sdpa")
                if how == "int8":
                    from torchao.quantization import Int8WeightOnlyConfig, quantize_

                    quantize_(m, Int8WeightOnlyConfig())

            def cand(m=m, akw=akw):
                return m.generate(ids, **akw)

            r["prep_s"] = seconds(cand, sync)
            base_s, cand_s = [], []
            for _ in range(REPEATS):
                base_s.append(seconds(plain, sync))
                cand_s.append(seconds(cand, sync))
            plain_all += base_s
            r["tokens_per_s"] = batch * new / statistics.median(cand_s)
            r["speedup"] = statistics.median(base_s) / statistics.median(cand_s)
        except Exception as exc:
            r["error"] = f"{type(exc).__name__}: {str(exc).splitlines()[0][:200]}"
        out["arms"][arm] = r
        print(f"  hand {name} b{batch} {arm}: {r}", flush=True)
        m = None
        torch.cuda.empty_cache() if device == "cuda" else None
    out["eager_tokens_per_s"] = batch * new / statistics.median(plain_all or [seconds(plain, sync)])
    ok = {a: r for a, r in out["arms"].items() if r.get("tokens_per_s")}
    best = max(ok, key=lambda a: ok[a]["tokens_per_s"]) if ok else None
    if best is None or ok[best]["speedup"] <= 1.0:
        out["hand_best"], out["hand_tokens_per_s"] = "plain", out["eager_tokens_per_s"]
    else:
        out["hand_best"], out["hand_tokens_per_s"] = best, ok[best]["tokens_per_s"]
    db = decode_bytes(model)
    out["mean_step_bytes"] = db.mean_step_bytes(batch, prompt, new)
    return out


def cli(*args: str, timeout: int) -> tuple[dict | None, float, int, str]:
    t0 = time.perf_counter()
    p = subprocess.run([sys.executable, "-m", "gobrrr", *args, "--json", "-q"],
                       capture_output=True, text=True, timeout=timeout,
                       env=dict(os.environ, NO_COLOR="1"))
    wall = time.perf_counter() - t0
    try:
        return json.loads(p.stdout), wall, len(p.stdout.encode()), p.stderr[-600:]
    except json.JSONDecodeError:
        return None, wall, 0, p.stderr[-600:]


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--out", required=True)
    p.add_argument("--md", required=True)
    p.add_argument("--models", default="gpt2,tinyllama-1.1b,qwen2.5-0.5b")
    p.add_argument("--batches", default="1,8")
    p.add_argument("--dtype", default="bf16")
    p.add_argument("--prompt", type=int, default=128)
    p.add_argument("--new", type=int, default=64)
    p.add_argument("--optimize-budget-s", type=float, default=240)
    p.add_argument("--skip-doctor", action="store_true")
    a = p.parse_args()
    device = "cuda" if torch.cuda.is_available() else "cpu"
    dtype = {"bf16": torch.bfloat16, "fp32": torch.float32}[a.dtype]
    bw = calibrate(device).bandwidth_bytes_per_s
    rows = json.loads(Path(a.out).read_text()) if Path(a.out).exists() else []
    for name in a.models.split(","):
        for b in map(int, a.batches.split(",")):
            print(f"=== {name} batch {b}", flush=True)
            hand = hand_search(name, b, dtype, a.prompt, a.new, device)
            common = [f"hf:{name}", "--generate", str(a.new), "--batch-size", str(b),
                      "--seq-len", str(a.prompt), "--dtype", a.dtype, "--device", device]
            opt, opt_wall, _, err = cli("optimize", *common, "--budget-s",
                                        str(a.optimize_budget_s),
                                        timeout=int(a.optimize_budget_s * 2 + 120))
            if opt is None:
                print("  optimize failed:", err, flush=True)
            row = {"workload": name, "batch": b, "dtype": a.dtype, "prompt": a.prompt,
                   "new_tokens": a.new,
                   "eager_tokens_per_s": hand["eager_tokens_per_s"],
                   "hand_best": hand["hand_best"],
                   "hand_tokens_per_s": hand["hand_tokens_per_s"],
                   "gobrrr_best": (opt or {}).get("winner") or "plain",
                   "gobrrr_tokens_per_s": None,
                   # the bound at the model's dtype (a bf16 winner from fp32 doubles it)
                   "bound_tokens_per_s": b * bw / hand["mean_step_bytes"],
                   "diagnose_s": None, "report_bytes": None,
                   "hand_arms": hand["arms"], "optimize_wall_s": opt_wall,
                   "optimize": opt}
            if opt:
                win = next((c for c in opt["candidates"] if c["name"] == opt.get("winner")),
                           None)
                row["gobrrr_tokens_per_s"] = (win["tokens_per_s"] if win
                                              else opt["baseline_tokens_per_s"])
                for c in opt["candidates"]:
                    print(f"  gobrrr {c['name']}: {c.get('tokens_per_s')} "
                          f"x{c.get('speedup')} top1 {c.get('top1_agreement')} "
                          f"rel {c.get('rel_err')} passed {c.get('passed')} "
                          f"prep {c.get('prep_s')} {c.get('error') or ''}", flush=True)
            if not a.skip_doctor:
                doc, doc_wall, size, err = cli("doctor", *common, timeout=400)
                if doc is None:
                    print("  doctor failed:", err, flush=True)
                else:
                    row["diagnose_s"] = doc.get("diagnose_s")
                    row["report_bytes"] = size
                    row["doctor_wall_s"] = doc_wall
                    row["decode_graph"] = doc["generation"].get("decode_graph")
            print("  row:", {k: v for k, v in row.items()
                             if k not in ("hand_arms", "optimize", "decode_graph")}, flush=True)
            rows = [r for r in rows if (r["workload"], r["batch"]) != (name, b)] + [row]
            Path(a.out).write_text(json.dumps(rows, indent=1))
            write_md(rows, Path(a.md))


def write_md(rows: list[dict], path: Path) -> None:
    def f(v, fmt="{:,.1f}"):
        return "-" if v is None else fmt.format(v)

    lines = ["| workload | batch | eager tok/s | hand best | hand tok/s | gobrrr best | "
             "gobrrr tok/s | gobrrr / hand | bound tok/s | of bound | diagnose s | "
             "report MB |", "|" + "---|" * 12]
    for r in rows:
        g, h = r.get("gobrrr_tokens_per_s"), r.get("hand_tokens_per_s")
        lines.append(
            f"| {r['workload']} | {r['batch']} | {f(r['eager_tokens_per_s'])} | "
            f"{r['hand_best']} | {f(h)} | {r['gobrrr_best']} | {f(g)} | "
            f"{f(g / h if g and h else None, '{:.2f}')} | "
            f"{f(r['bound_tokens_per_s'], '{:,.0f}')} | "
            f"{f(g / r['bound_tokens_per_s'] if g else None, '{:.1%}')} | "
            f"{f(r.get('diagnose_s'))} | "
            f"{f(r['report_bytes'] / 1e6 if r.get('report_bytes') else None, '{:.2f}')} |")
    path.write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
