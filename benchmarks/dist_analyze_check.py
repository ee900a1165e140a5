"""`gobrrr analyze` of a distributed doctor's kept rank traces against that doctor's own
report (issue 27, item 3): per rank, the four shares and the exposed communication.

    python benchmarks/dist_analyze_check.py OUT.json DOCTOR.json:TRACES_DIR [...]

DOCTOR.json is `torchrun ... -m gobrrr doctor TARGET --json --rank-traces TRACES_DIR`'s
output; TRACES_DIR holds its rank{N}.json traces. Analyze runs on this machine with its
cached calibration (the doctor's machine's where the traces came from there). Printed and
written per case and rank: doctor's fractions, analyze's, the largest gap in points, and
the exposed communication (transfer + waiting) as a share of each one's T_wall. Doctor's
T_wall is unprofiled, analyze's the traced steps': on a CPU (gloo) the profiler slows the
host and the comparison says little; on GPUs the kernels do not slow down.

Each case is analysed twice: from the traced steps alone, and with the job's step time
given (`analyze --step-ms`: the slowest rank's unprofiled T_wall from the doctor's
report, the step a user's training log shows, since the ranks step together), the
`given` figures (session s: on one H200 the profiler's host cost was the whole gap).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from gobrrr.analyze import analyze

PARTS = ("overhead", "memory", "compute", "communication")


def _exposed_share(rank: dict[str, Any]) -> float:
    wall = rank["wall_s"]
    return (rank["exposed_transfer_s"] + rank["exposed_waiting_s"]) / wall if wall else 0.0


def check(doctor_json: Path, traces: Path) -> dict[str, Any]:
    doc = json.loads(doctor_json.read_text())["distributed"]
    files = sorted(traces.glob("rank*.json*"))
    got = analyze(files).to_dict()["distributed"]
    by_rank = {r["rank"]: r for r in got["ranks"]}
    job_step_s = max(r["wall_s"] for r in doc["ranks"])
    given = analyze(files, step_s=job_step_s).to_dict()["distributed"]
    given_by_rank = {r["rank"]: r for r in given["ranks"]}

    def gap_of(a: dict[str, Any], d: dict[str, Any]) -> float:
        return 100 * max(abs(d["fractions"].get(k, 0.0) - a["fractions"].get(k, 0.0))
                         for k in PARTS)

    rows = []
    for r in doc["ranks"]:
        a, g = by_rank.get(r["rank"]), given_by_rank.get(r["rank"])
        if a is None or g is None:
            continue
        rows.append({"rank": r["rank"], "doctor": r["fractions"], "analyze": a["fractions"],
                     "gap_points": gap_of(a, r),
                     "doctor_wall_s": r["wall_s"], "analyze_wall_s": a["wall_s"],
                     "doctor_exposed_share": _exposed_share(r),
                     "analyze_exposed_share": _exposed_share(a),
                     "given_step_s": job_step_s, "given": g["fractions"],
                     "given_gap_points": gap_of(g, r),
                     "given_exposed_share": _exposed_share(g),
                     "no_sync_bound": (r.get("no_sync") or {}).get("bound_fraction")})
    return {"doctor": str(doctor_json), "traces": [str(f) for f in files], "ranks": rows}


def main(argv: list[str]) -> None:
    if len(argv) < 2 or any(":" not in a for a in argv[1:]):
        raise SystemExit(__doc__)
    out = []
    for spec in argv[1:]:
        doctor, traces = spec.split(":", 1)
        if not Path(doctor).is_file() or not any(Path(traces).glob("rank*.json*")):
            print(f"{spec}: skipped (no doctor report or no rank traces)")
            continue
        case = check(Path(doctor), Path(traces))
        out.append(case)
        for r in case["ranks"]:
            fr = lambda d: "/".join(f"{d.get(k, 0.0):.3f}" for k in PARTS)  # noqa: E731
            print(f"{Path(doctor).stem} rank {r['rank']}: doctor {fr(r['doctor'])} of "
                  f"{r['doctor_wall_s'] * 1e3:.2f} ms, analyze {fr(r['analyze'])} of "
                  f"{r['analyze_wall_s'] * 1e3:.2f} ms: gap {r['gap_points']:.1f} points; "
                  f"exposed communication {100 * r['doctor_exposed_share']:.1f}% / "
                  f"{100 * r['analyze_exposed_share']:.1f}%; given the job's step "
                  f"{r['given_step_s'] * 1e3:.2f} ms: gap {r['given_gap_points']:.1f} points, "
                  f"exposed {100 * r['given_exposed_share']:.1f}%"
                  + (f", no_sync bound {100 * r['no_sync_bound']:.1f}%"
                     if r["no_sync_bound"] is not None else ""))
    Path(argv[0]).write_text(json.dumps(out, indent=1) + "\n")


if __name__ == "__main__":
    main(sys.argv[1:])
