"""The what-if counts of README.md: each precision row's reported prediction with its
after-time D' changed by a per-op recomputation from the report (`per_call`,
`gemm_times`), then floored by max(D', H) or summed (D' + H).

    python3 whatif.py  (from this folder; session g's rows beside it as in README.md)
"""

from __future__ import annotations

import json
import statistics
import sys
import tarfile
from pathlib import Path
from typing import Any

HERE = Path(__file__).parent
ROWS = HERE / "../../session-2026-12-02g/models"
PEAK = {"tf32": 6.9, "bf16": 13.4}  # the H200 peaks' ratios in the reports' bases
PRECISION = ("tf32", "bf16_cast", "bf16_autocast")


def reports() -> dict[str, dict[str, Any]]:
    out = {}
    with tarfile.open(HERE / "reports.tar.gz") as tar:
        for m in tar.getmembers():
            f = tar.extractfile(m)
            if f is not None and m.name.startswith("doctor_"):
                out[m.name[len("doctor_"):-len(".json")]] = json.load(f)
    return out


def device_after(d: dict[str, Any], spec: str, mha: bool = False,
                 offset: bool = False) -> float:
    b, fmt = d["budget"], "tf32" if spec == "tf32" else "bf16"
    probe = {2 * g["batch"] * g["m"] * g["n"] * g["k"]: g for g in b.get("gemm_times") or []}
    kernel: dict[int, list[float]] = {}
    for c in b["per_call"]:
        if c["flops"] in probe and c["regime"] == "compute":
            kernel.setdefault(c["flops"], []).append(c["time_s"])
    in_proj = [g for g in b.get("gemm_times") or []
               if (g["m"], g["n"], g["k"]) == (6304, 3072, 768)]
    total = b["overhead_s"]
    for c in b["per_call"]:
        t = c["time_s"]
        if c["regime"] == "compute":
            g = probe.get(c["flops"])
            if g is None:
                t /= PEAK[fmt]
            else:
                r = g[f"{fmt}_s"] / g["fp32_s"]
                if offset:  # the probe's time over the workload's own kernel, removed
                    off = max(0.0, g["fp32_s"] - statistics.median(kernel[c["flops"]]))
                    r = max((g[f"{fmt}_s"] - off) / (g["fp32_s"] - off), 1 / PEAK[fmt])
                t *= r
        elif c["regime"] == "memory":
            if mha and c["op"] == "aten::_native_multi_head_attention" and in_proj:
                t *= in_proj[0][f"{fmt}_s"] / in_proj[0]["fp32_s"]
            elif spec == "bf16_cast":
                t /= 2
        total += t
    return total


def count(reps: dict[str, dict[str, Any]], issue: dict[str, float], rule: str,
          bench_h: bool, **kw: bool) -> tuple[int, int, list[str]]:
    n = within = 0
    misses = []
    for case, d in sorted(reps.items()):
        f = ROWS / f"gobrrr_{case}.json"
        if not f.exists():
            continue
        measured = {r["name"]: r["measured_speedup"] for r in json.loads(f.read_text())[
            "remedies"] if r.get("measured_speedup") and r["status"] in (
                "verified", "no significant change", "slower")}
        b = d["budget"]
        for r in d["remedies"]:
            spec, pred = r.get("spec"), r.get("predicted_speedup")
            if not spec or spec not in measured or not pred:
                continue
            if spec in PRECISION:
                t = b["wall_s"]
                dev = max(1e-6, t / pred + device_after(d, spec, **kw) - device_after(d, spec))
                h = (issue.get(case) if bench_h else None) or b.get("host_issue_s") or 0.0
                pred = t / (max(dev, h) if rule == "max" else dev + h)
            ratio = pred / measured[spec]
            n += 1
            if 1 / 1.5 <= ratio <= 1.5:
                within += 1
            else:
                misses.append(f"{case} {spec} {pred:.2f}/{measured[spec]:.2f}")
    return within, n, misses


def main() -> int:
    reps = reports()
    issue = {r["case"]: r["host_issue_s"]
             for r in json.loads((HERE / "host_issue.json").read_text())}
    for name, rule, bench_h, kw in [
            ("as reported", "max", False, {}),
            ("MHA op as matmul", "max", False, {"mha": True}),
            ("probe offset removed", "max", False, {"offset": True}),
            ("H from host_issue.json", "max", True, {}),
            ("MHA + probe + H from host_issue.json", "max", True,
             {"mha": True, "offset": True}),
            ("D' + H", "sum", False, {}),
            ("MHA + probe, D' + H", "sum", False, {"mha": True, "offset": True})]:
        within, n, misses = count(reps, issue, rule, bench_h, **kw)
        sys.stdout.write(f"{name}: {within} of {n}\n  " + "; ".join(misses) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
