"""Issue 23's proof on a GPU: traces recorded the simplest way (a `profile()` block around
a few calls, no schedule, no `prof.step()`, then `export_chrome_trace`), eager and under
torch.compile (default and reduce-overhead), read by `gobrrr analyze`, beside
`gobrrr.diagnose` (doctor) of the same callables. Each trace is recorded with plain torch
(no gobrrr code runs while recording); the doctor runs afterwards, unprofiled.

Workloads (random weights, no downloads): the pointwise chain (2^24 fp32), the 4-layer
MLP at batch 1, GPT-2 small 8 x 512 (inference), ResNet-50 at batch 256 (inference), the
GPT-2 small training step 4 x 256 (AdamW), and the compiled versions of each (NAME@default,
NAME@reduce-overhead). `gpt2_train_bf16_8x256` is the optimize table's training row with
the optimizer fused and bf16 autocast, uncompiled: with its compiled versions, where the
compile's own gain on that step comes from (issue 24: predicted 1.25-1.50x over fused +
autocast + CUDA graphs, measured 1.83-1.89x).

Usage (GPU machine): python3 benchmarks/plain_traces_gpu.py OUT_DIR [--doctors=N] [NAME ...]
Writes OUT_DIR/NAME.json.gz (the traces) and OUT_DIR/plain_traces.json: a list of
{"workload", "doctor": {regime, fractions, t_wall_ms}, "analyze": {regime, fractions,
step_ms, steps, step_rule, check}, "max_diff_points", "user_step_ms",
"user_step_ms_after_doctor", "trace"}. A name given twice is recorded twice (NAME-2).

`user_step_ms` is the step time a user's own loop would log, timed after the recording
with plain torch (`user_timer`: calls in a loop, synchronized at the end of each batch of
calls, the median batch's mean call): what `gobrrr analyze --step-ms` takes, checked
against doctor when the traces are read again (the trace alone carries the profiler's
host cost in its steps' span).

`--doctors=N` runs doctor N times, each followed by the user's loop ("doctors",
"user_steps_ms": the first before any doctor); "doctor" is then the run of the median
T_wall and `plain_traces_reanalyze.py` compares `--step-ms` (the median of the user's
loops) with it and says how far doctor's own runs lay apart. On a host-bound step the two
timers, seconds apart, differed by up to 31% (session s) and doctor's overhead share by
15 points between runs: the 10-point criterion is no tighter than that.
"""

from __future__ import annotations

import gzip
import json
import shutil
import sys
import time
import traceback
from pathlib import Path

import torch
from torch import nn
from torch.profiler import ProfilerActivity, profile

CALLS = 4  # profiled calls per trace


def pointwise():
    big = torch.randn(2**24, device="cuda")
    return (lambda t: ((t * 2).sin() + 1).relu()), (big,)


def mlp_b1():
    torch.manual_seed(0)
    model = nn.Sequential(*[m for _ in range(4) for m in (nn.Linear(512, 512),
                                                          nn.GELU())]).cuda().eval()
    x = torch.randn(1, 512, device="cuda")

    def forward(t):
        with torch.no_grad():
            return model(t)

    return forward, (x,)


def gpt2():
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    model = GPT2LMHeadModel(GPT2Config(attn_implementation="sdpa")).cuda().eval()
    ids = torch.randint(0, 50257, (8, 512), device="cuda")

    def forward(t):
        with torch.no_grad():
            return model(input_ids=t).logits

    return forward, (ids,)


def resnet50():
    import torchvision

    torch.manual_seed(0)
    model = torchvision.models.resnet50().cuda().eval()
    x = torch.randn(256, 3, 224, 224, device="cuda")

    def forward(t):
        with torch.no_grad():
            return model(t)

    return forward, (x,)


def gpt2_train(batch: int = 4, bf16: bool = False):
    """GPT-2 small's training step at batch x 256 with AdamW; `bf16`: the optimizer fused
    and the forward under bf16 autocast (the optimize table's winning stack without its
    compile: what that compile's own gain is measured against)."""
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    model = GPT2LMHeadModel(GPT2Config(attn_implementation="sdpa", use_cache=False)).cuda()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=bf16 or None)
    ids = torch.randint(0, 50257, (batch, 256), device="cuda")

    def step(t):
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=bf16):
            loss = model(input_ids=t, labels=t).loss
        loss.backward()
        opt.step()
        return loss.detach()

    return step, (ids,)


EAGER = {"pointwise": pointwise, "mlp_b1": mlp_b1, "gpt2_8x512": gpt2,
         "resnet50_b256": resnet50, "gpt2_train_4x256": gpt2_train,
         "gpt2_train_bf16_8x256": lambda: gpt2_train(8, bf16=True)}


def build(name: str):
    base, _, mode = name.partition("@")
    fn, args = EAGER[base]()
    if mode:
        fn = torch.compile(fn, mode=None if mode == "default" else mode)
    return fn, args


def record(fn, args, path: Path) -> None:
    for _ in range(3):  # warm-up (and compile) outside the profiler
        fn(*args)
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA],
                 record_shapes=True) as prof:
        for _ in range(CALLS):
            fn(*args)
        torch.cuda.synchronize()
    raw = path.with_suffix("")  # NAME.json
    prof.export_chrome_trace(str(raw))
    with raw.open("rb") as src, gzip.open(path, "wb") as dst:
        shutil.copyfileobj(src, dst)
    raw.unlink()


def user_timer(fn, args, batches: int = 7, min_batch_s: float = 0.05) -> float:
    """The mean call of the median batch, in ms: `for _ in range(n): fn(*args)` then
    `torch.cuda.synchronize()`, as a training loop's steps-per-second meter sees it."""
    torch.cuda.synchronize()
    n, t = 1, 0.0
    while True:  # calls per batch: enough for min_batch_s
        t0 = time.perf_counter()
        for _ in range(n):
            fn(*args)
        torch.cuda.synchronize()
        t = time.perf_counter() - t0
        if t >= min_batch_s or n >= 1024:
            break
        n *= 2
    per_call = []
    for _ in range(batches):
        t0 = time.perf_counter()
        for _ in range(n):
            fn(*args)
        torch.cuda.synchronize()
        per_call.append((time.perf_counter() - t0) / n)
    return sorted(per_call)[len(per_call) // 2] * 1e3


def main() -> None:
    import gobrrr
    from gobrrr.analyze import analyze

    argv = [a for a in sys.argv[1:] if not a.startswith("--doctors=")]
    doctors = int(next((a.split("=", 1)[1] for a in sys.argv[1:]
                        if a.startswith("--doctors=")), "1"))
    out = Path(argv[0])
    out.mkdir(parents=True, exist_ok=True)
    names = argv[1:] or [*EAGER, "pointwise@default", "mlp_b1@default",
                             "gpt2_8x512@default", "resnet50_b256@default",
                             "mlp_b1@reduce-overhead", "gpt2_8x512@reduce-overhead"]
    rows = []
    for name in names:
        t0 = time.perf_counter()
        try:
            fn, args = build(name)
            stem = name.replace('@', '-')
            seen = sum(r["workload"] == name for r in rows)  # a name given again: -2, -3
            path = out / f"{stem}{f'-{seen + 1}' if seen else ''}.json.gz"
            record(fn, args, path)
            user_ms = user_timer(fn, args)
            a = analyze([path])
            # --doctors=N: doctor N times, each followed by the user's loop, so that
            # the comparison can say how far doctor moves from itself on this host
            runs, users = [], [user_ms]
            for _ in range(doctors):
                runs.append(gobrrr.diagnose(fn, *args, time_budget_s=1.0,
                                            experiments=False).to_dict())
                users.append(user_timer(fn, args))  # the host's speed drifts in seconds
            user_after_ms = users[1]
            # the doctor of the median T_wall (one real run, not averaged shares)
            by_wall = sorted(runs, key=lambda x: x["timing"]["median_s"])
            ad, dd = a.to_dict(), by_wall[(len(by_wall) - 1) // 2]
            diff = max(abs(ad["fractions"].get(k, 0) - dd["fractions"].get(k, 0))
                       for k in ("compute", "memory", "overhead"))
            row = {"workload": name,
                   "doctor": {"regime": dd["regime"],
                              "fractions": {k: round(v, 3) for k, v in dd["fractions"].items()},
                              "t_wall_ms": round(dd["timing"]["median_s"] * 1e3, 3)},
                   "analyze": {"regime": ad["regime"],
                               "fractions": {k: round(v, 3) for k, v in ad["fractions"].items()},
                               "step_ms": round(ad["budget"]["wall_s"] * 1e3, 3),
                               "steps": ad["workload"]["trace"]["steps"],
                               "step_rule": ad["workload"]["trace"].get("step_rule"),
                               "check": [c for c in ad["workload"]["trace"].get("check", [])
                                         if not c["ok"]]},
                   "max_diff_points": round(100 * diff, 1),
                   "user_step_ms": round(user_ms, 4),
                   "user_step_ms_after_doctor": round(user_after_ms, 4),
                   "doctors": [{"fractions": {k: round(v, 3)
                                              for k, v in x["fractions"].items()},
                                "t_wall_ms": round(x["timing"]["median_s"] * 1e3, 3)}
                               for x in runs],
                   "user_steps_ms": [round(u, 4) for u in users],
                   "trace": path.name,
                   "trace_bytes": path.stat().st_size,
                   "seconds": round(time.perf_counter() - t0, 1)}
        except Exception as e:  # one workload's failure is a row, the rest still run
            row = {"workload": name, "error": f"{type(e).__name__}: {e}",
                   "traceback": traceback.format_exc()[-2000:]}
        rows.append(row)
        print(json.dumps({k: v for k, v in row.items() if k != "traceback"}), flush=True)
        (out / "plain_traces.json").write_text(json.dumps(rows, indent=1))
        torch.cuda.empty_cache()
    from gobrrr.hardware import cache_dir
    for cal in cache_dir().glob("ceilings-cuda-*.json"):  # the sitting's ceilings, for
        shutil.copy(cal, out / "calibrate.json")  # reading the traces again elsewhere


if __name__ == "__main__":
    main()
