"""Issue 13, ops below their roof, on the GPU: is hand-written attention's softmax found
instruction-bound, the dominant cost, with SDPA as the first remedy?

1. Calibrate (forced): the element-wise math rates per dtype (exp, row softmax) beside
   the measured bandwidth: a probe far below the bandwidth met its instruction bound.
2. `gobrrr doctor examples:attention --device cuda` (bf16, batch 8, 12 heads, seq 4096,
   head dim 64; the issue's case) through the API: the softmax's share of the time, its
   regime, limit, reason, cause; the verdict; the remedies in order.
3. Ground truth timed apart with CUDA events (no profiler): the softmax kernel alone (its
   achieved bytes/s against the measured bandwidth) and the whole hand-written attention
   against F.scaled_dot_product_attention on the same q, k, v (the speedup SDPA gives,
   beside the one the report predicts).

Usage (GPU machine, repository root): PYTHONPATH=src python3 benchmarks/attention_softmax.py
(`--device cpu`: the same steps on the CPU example, a smoke run of this script.)
Writes $OUT/attention_softmax.{json,txt}, $OUT/attention-report.json and
$OUT/h200-calibrate.json (OUT defaults to ./out). About a minute on an H200.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import torch

from gobrrr import examples
from gobrrr.api import diagnose_workload
from gobrrr.hardware import MATH_KINDS, calibrate
from gobrrr.targets import load_target

OUT = Path(os.environ.get("OUT", "out"))
BATCH = 8


def say(lines: list[str], text: str) -> None:
    print(text, flush=True)
    lines.append(text)


def event_time_s(fn, device: str, calls: int = 20) -> float:
    """Median seconds per call by CUDA events (CPU: perf_counter), after 3 warm calls."""
    for _ in range(3):
        fn()
    if device == "cuda":
        torch.cuda.synchronize()
    times = []
    for _ in range(calls):
        if device != "cuda":
            t0 = time.perf_counter()
            fn()
            times.append(time.perf_counter() - t0)
            continue
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b) / 1e3)
    return sorted(times)[len(times) // 2]


def softmax_alone(q, k, scale: float, device: str) -> tuple[float, int, int]:
    """(seconds, elements, bytes read + written) of the attention's softmax alone, on
    the example's own scores, into a preallocated output."""
    scores = (q @ k.transpose(-2, -1)) * scale
    probs = torch.empty_like(scores)
    s = event_time_s(lambda: torch.ops.aten._softmax.out(scores, -1, False, out=probs),
                     device)
    return s, scores.numel(), 2 * scores.numel() * scores.element_size()


def main() -> int:
    device = "cpu" if sys.argv[1:] == ["--device", "cpu"] else "cuda"
    if device == "cuda" and not torch.cuda.is_available():
        print("needs CUDA (or --device cpu for a smoke run)", file=sys.stderr)
        return 2
    OUT.mkdir(parents=True, exist_ok=True)
    lines: list[str] = []
    result: dict = {"torch": torch.__version__,
                    "gpu": torch.cuda.get_device_name(0) if device == "cuda" else "cpu",
                    "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    say(lines, f"{result['gpu']}, torch {result['torch']}, {result['when']}")

    # 1. calibration
    t0 = time.perf_counter()
    ceil = calibrate(device, force=device == "cuda")
    cal_name = "h200-calibrate.json" if device == "cuda" else "cpu-calibrate.json"
    (OUT / cal_name).write_text(json.dumps(ceil.to_dict(), indent=2))
    bw = ceil.bandwidth_bytes_per_s
    say(lines, f"calibrated in {time.perf_counter() - t0:.1f} s ({ceil.source}); bandwidth "
               f"{bw / 1e12:.2f} TB/s ({ceil.bandwidth_kernel})")
    rates = {}
    for kind in MATH_KINDS:
        for dtype in ("fp32", "bf16", "fp16"):
            r, bps = ceil.math_elems_per_s(kind, dtype), ceil.math_bytes_per_s(kind, dtype)
            if r is None or bps is None:
                say(lines, f"  {kind:8s} {dtype}: not measured "
                           f"({ceil.details.get('math_errors', {}).get(dtype, 'not probed here')})")
                continue
            rates[f"{kind} {dtype}"] = {"elems_per_s": r, "bytes_per_s": bps,
                                        "pct_of_bandwidth": 100 * bps / bw}
            say(lines, f"  {kind:8s} {dtype}: {r / 1e9:8.1f} G elem/s = {bps / 1e12:.2f} "
                       f"TB/s = {100 * bps / bw:5.1f}% of the bandwidth")
    result["calibration"] = {"bandwidth_bytes_per_s": bw, "math": rates,
                             "details": {k: ceil.details.get(k) for k in
                                         ("math_elems", "math_row", "math_errors")},
                             "calibrate_s": ceil.calibrate_s}

    # 2. doctor examples:attention
    t0 = time.perf_counter()
    w = load_target("examples:attention", device,
                    batch_size=BATCH if device == "cuda" else None)
    rep = diagnose_workload(w, time_budget_s=2.0 if device == "cuda" else 0.5,
                            experiments=device == "cuda")
    d = rep.to_dict()
    (OUT / "attention-report.json").write_text(json.dumps(d, indent=2, default=str))
    total_s = rep.budget.total_s
    say(lines, f"doctor examples:attention (batch {d['workload']['batch_size']}) in "
               f"{time.perf_counter() - t0:.1f} s: {d['regime'].upper()}-BOUND, "
               + ", ".join(f"{k} {100 * v:.0f}%" for k, v in d["fractions"].items())
               + f" of {total_s * 1e3:.3f} ms")
    for e in d["verdict"]["evidence"]:
        say(lines, f"  - {e}")
    say(lines, f"  {d['verdict']['agreement']}")
    sm = next((r for r in rep.budget.per_op if r.name == "aten::_softmax"), None)
    top = rep.budget.per_op[0] if rep.budget.per_op else None
    if sm is not None:
        result["softmax"] = {
            "share_of_time": sm.time_s / total_s if total_s else None,
            "time_s": sm.time_s, "regime": sm.bound, "limit": sm.limit,
            "roofline_fraction": sm.roofline_fraction, "roof_band": sm.roof_band,
            "math_floor_s": sm.math_floor_s, "reason": sm.reason, "cause": sm.cause,
            "dominant_op": top is not None and top.name == sm.name}
        say(lines, f"softmax: {100 * sm.time_s / total_s:.0f}% of the time "
                   f"({sm.time_s * 1e3:.3f} ms), {sm.bound} (limit {sm.limit}), "
                   f"{100 * (sm.roofline_fraction or 0):.0f}% of its roofline "
                   f"[{sm.roof_band or 'above 50%'}]; dominant op: "
                   f"{result['softmax']['dominant_op']}")
        say(lines, f"  reason: {sm.reason}")
        say(lines, f"  cause: {sm.cause}")
    else:
        say(lines, "softmax: NOT FOUND among the ops")
    for r in rep.budget.per_op[:6]:
        say(lines, f"  op {r.name:28s} {r.time_s * 1e3:8.3f} ms {r.bound:8s} {r.limit:11s} "
                   f"{100 * (r.roofline_fraction or 0):4.0f}% of roof")
    result["remedies"] = [{"spec": r.spec, "name": r.name,
                           "predicted_speedup": r.predicted_speedup, "basis": r.basis}
                          for r in rep.remedies]
    for i, r in enumerate(rep.remedies):
        pred = f"{r.predicted_speedup:.2f}x" if r.predicted_speedup else "-"
        say(lines, f"remedy {i + 1}: {r.name} ({r.spec}) {pred}: {r.basis}")
    result["top_remedy"] = rep.remedies[0].spec if rep.remedies else None
    result["report_regime"] = d["regime"]
    result["fractions"] = d["fractions"]
    result["notes"] = d["notes"]

    # 3. ground truth, CUDA events, no profiler
    fn, (q, k, v) = examples.get("attention").factory(d["workload"]["batch_size"], device)
    scale = q.shape[-1] ** -0.5
    with torch.no_grad():
        sm_s, sm_elems, sm_bytes = softmax_alone(q, k, scale, device)
        hand_s = event_time_s(lambda: fn(q, k, v), device)
        sdpa = torch.nn.functional.scaled_dot_product_attention
        sdpa_s = event_time_s(lambda: sdpa(q, k, v, scale=scale), device)
        ref = fn(q, k, v)
        err = (sdpa(q, k, v, scale=scale) - ref).abs().max().item()
    result["ground_truth"] = {
        "softmax_s": sm_s, "softmax_bytes": sm_bytes,
        "softmax_pct_of_bandwidth": 100 * sm_bytes / sm_s / bw,
        "softmax_elems_per_s": sm_elems / sm_s,
        "hand_written_s": hand_s, "softmax_share_of_hand_written": sm_s / hand_s,
        "sdpa_s": sdpa_s, "sdpa_speedup": hand_s / sdpa_s, "sdpa_max_abs_err": err}
    g = result["ground_truth"]
    say(lines, f"ground truth (CUDA events): softmax alone {sm_s * 1e3:.3f} ms = "
               f"{g['softmax_elems_per_s'] / 1e9:.1f} G elem/s, "
               f"{sm_bytes / sm_s / 1e12:.2f} TB/s = {g['softmax_pct_of_bandwidth']:.0f}% of "
               f"the measured bandwidth; {100 * g['softmax_share_of_hand_written']:.0f}% of "
               f"the hand-written attention ({hand_s * 1e3:.3f} ms)")
    pred = next((r["predicted_speedup"] for r in result["remedies"] if r["spec"] == "sdpa"),
                None)
    say(lines, f"SDPA: {sdpa_s * 1e3:.3f} ms, {g['sdpa_speedup']:.2f}x measured vs "
               f"{pred if pred is None else f'{pred:.2f}x'} predicted (max abs err {err:.3g})")
    ok = (result.get("softmax", {}).get("limit") == "instruction"
          and result.get("softmax", {}).get("dominant_op")
          and result["top_remedy"] == "sdpa")
    result["issue_case_right"] = bool(ok)
    say(lines, f"issue case right (softmax instruction-bound, dominant, SDPA first): {ok}")
    (OUT / "attention_softmax.json").write_text(json.dumps(result, indent=2, default=str))
    (OUT / "attention_softmax.txt").write_text("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
