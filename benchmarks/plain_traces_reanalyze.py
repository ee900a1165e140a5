"""Issue 23's plain traces read again, on any machine, with and without the step time a
user's loop logged (`gobrrr analyze --step-ms`), beside doctor of the same sitting.

    python benchmarks/plain_traces_reanalyze.py DIR [--doctor-wall]

DIR holds what benchmarks/plain_traces_gpu.py wrote on the GPU (the traces,
plain_traces.json with doctor's figures and `user_step_ms`, the sitting's
calibrate.json, cached here as this machine's so the ceilings are that GPU's). Prints a
markdown table row per trace and writes DIR/reanalysed.json. `--doctor-wall` gives
doctor's own T_wall as the step instead (a check: what is left is the busy time's split).
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from pathlib import Path

K = ("overhead", "memory", "compute")


def main() -> None:
    folder = Path(sys.argv[1])
    doctor_wall = "--doctor-wall" in sys.argv[2:]
    os.environ["XDG_CACHE_HOME"] = tempfile.mkdtemp()
    from gobrrr.hardware import cache_dir

    cal = json.loads((folder / "calibrate.json").read_text())
    cal.pop("datasheet", None)
    cache_dir().mkdir(parents=True, exist_ok=True)
    (cache_dir() / "ceilings-cuda-0123456789abcdef.json").write_text(json.dumps(cal))
    from gobrrr.analyze import analyze

    def read(report: dict, doctor: dict) -> dict:
        fr = {k: round(report["fractions"].get(k, 0.0), 3) for k in K}
        gap = max(abs(fr[k] - doctor["fractions"].get(k, 0.0)) for k in K)
        return {"regime": report["regime"], "fractions": fr,
                "step_ms": round(report["budget"]["wall_s"] * 1e3, 4),
                "gap_points": round(100 * gap, 1)}

    def show(fr: dict) -> str:
        return "/".join(f"{fr[k]:.3f}" for k in K)

    out = []
    for r in json.loads((folder / "plain_traces.json").read_text()):
        if "error" in r:
            continue
        path = folder / r.get("trace", r["workload"].replace("@", "-") + ".json.gz")
        d = r["doctor"]
        users = r.get("user_steps_ms") or [r["user_step_ms"]]
        given_ms = d["t_wall_ms"] if doctor_wall else sorted(users)[(len(users) - 1) // 2]
        # how far doctor's own runs lay apart (plain_traces_gpu.py --doctors=N)
        runs = r.get("doctors") or [d]
        spread = max(max(x["fractions"].get(k, 0.0) for x in runs)
                     - min(x["fractions"].get(k, 0.0) for x in runs) for k in K)
        a0 = read(analyze([path]).to_dict(), d)
        a1 = read(analyze([path], step_s=given_ms * 1e-3).to_dict(), d)
        out.append({"workload": r["workload"], "trace": path.name, "doctor": d,
                    "analyze": a0, "given_ms": given_ms, "analyze_given": a1,
                    "user_step_ms_after_doctor": r.get("user_step_ms_after_doctor"),
                    "doctor_runs": len(runs),
                    "doctor_spread_points": round(100 * spread, 1)})
        print(f"| {r['workload']} | {d['regime']} {show(d['fractions'])} of "
              f"{d['t_wall_ms']:.3f} ms | {a0['regime']} {show(a0['fractions'])} of "
              f"{a0['step_ms']:.3f} ms | {a0['gap_points']} | {given_ms:.4g} | "
              f"{a1['regime']} {show(a1['fractions'])} | {a1['gap_points']} | "
              f"{round(100 * spread, 1)} ({len(runs)}) |")
    name = "reanalysed-doctor-wall.json" if doctor_wall else "reanalysed.json"
    (folder / name).write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
