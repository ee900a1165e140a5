"""`gobrrr analyze` on a ~1 GB trace: wall time and peak memory.

Synthesises a large torch.profiler trace by replicating the two profiled steps of
tests/data/traces/mlp_train_step.json.gz (recorded on an H200): each copy is shifted in
time past the previous one, and its External ids, correlation ids, flow ids and
ProfilerStep numbers are renumbered, so the copies read as consecutive steps of one run.
Then runs `gobrrr analyze --json` on it in a child process and reports the child's wall
time and peak RSS (resource.getrusage(RUSAGE_CHILDREN).ru_maxrss), and checks that the
per-step figures equal those of the original trace.

`--unmarked` leaves the ProfilerStep# ranges out (a trace recorded with a plain
`profile()` block, no schedule): analyze then finds the steps itself (repeated calls,
tracefile/stepfind.py) and must find as many as the copies hold.

Usage: python benchmarks/analyze_large.py [--gb 1.0] [--dir /tmp] [--keep] [--unmarked]
The synthesised file is deleted afterwards unless --keep: never commit it.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import platform
import resource
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
SOURCE = ROOT / "tests" / "data" / "traces" / "mlp_train_step.json.gz"
GAP_US = 500.0  # idle time between copies: outside every step, so it is never counted


def _shifted(e: dict[str, Any], c: int, dt_us: float, d_ext: int, d_corr: int,
             d_step: int) -> dict[str, Any]:
    """Event `e` of copy `c`: later by c * dt_us, ids renumbered."""
    e = dict(e)
    if isinstance(e.get("ts"), (int, float)):
        e["ts"] = round(e["ts"] + c * dt_us, 3)
    if e.get("ph") in ("s", "f") and isinstance(e.get("id"), int):
        e["id"] += c * d_corr  # flow arrows: launch -> kernel, by correlation id
    name = e.get("name")
    if isinstance(name, str) and name.startswith("ProfilerStep#"):
        e["name"] = f"ProfilerStep#{int(name.split('#')[1]) + c * d_step}"
    args = e.get("args")
    if isinstance(args, dict):
        args = dict(args)
        for key, delta in (("External id", d_ext), ("correlation", d_corr)):
            if isinstance(args.get(key), int):
                args[key] += c * delta
        e["args"] = args
    return e


def _is_step_marker(e: dict[str, Any]) -> bool:
    return str(e.get("name", "")).startswith("ProfilerStep#")


def load_source(unmarked: bool) -> dict[str, Any]:
    """The source trace, without its ProfilerStep# ranges (host and device side) when
    `unmarked`."""
    data = json.loads(gzip.decompress(SOURCE.read_bytes()))
    if unmarked:
        data["traceEvents"] = [e for e in data["traceEvents"] if not _is_step_marker(e)]
    return data


def synthesise(out: Path, target_bytes: int, *, unmarked: bool = False) -> dict[str, Any]:
    """Write the replicated trace; return what was written."""
    data = json.loads(gzip.decompress(SOURCE.read_bytes()))
    events = data["traceEvents"]
    timed = [e for e in events if e.get("ph") == "X" and isinstance(e.get("ts"), (int, float))]
    t0 = min(e["ts"] for e in timed)
    t1 = max(e["ts"] + e.get("dur", 0) for e in timed)
    ext = [e["args"]["External id"] for e in events
           if isinstance(e.get("args"), dict) and isinstance(e["args"].get("External id"), int)]
    corr = [v for e in events for v in (
        (e["args"].get("correlation") if isinstance(e.get("args"), dict) else None),
        (e.get("id") if e.get("ph") in ("s", "f") else None)) if isinstance(v, int)]
    steps = sum(1 for e in events if e.get("cat") == "user_annotation"
                and _is_step_marker(e))

    dt_us, d_ext, d_corr = (t1 - t0) + GAP_US, max(ext) + 1, max(corr) + 1
    period_us = None
    if unmarked:
        # the copies continue the source's own period (its two steps' starts apart), no
        # idle gap: with nothing marking them, the time between calls is the steps'
        marks = sorted(e["ts"] for e in events if e.get("cat") == "user_annotation"
                       and _is_step_marker(e))
        period_us = marks[1] - marks[0]
        dt_us = max(len(marks) * period_us, t1 - t0)
        events = [e for e in events if not _is_step_marker(e)]
    # Metadata and trace-wide markers once; the rest per copy.
    once = [e for e in events if e.get("ph") in ("M", "i") or e.get("cat") == "Trace"]
    per_copy = [e for e in events if e not in once]
    head = {k: v for k, v in data.items() if k not in ("traceEvents", "traceName")}
    copies = 0
    with out.open("w") as f:
        f.write("{\n")
        for k, v in head.items():
            f.write(f"  {json.dumps(k)}: {json.dumps(v)},\n")
        f.write('  "traceEvents": [\n')
        f.write(",\n".join(json.dumps(e) for e in once))
        while f.tell() < target_bytes:
            chunk = [json.dumps(_shifted(e, copies, dt_us, d_ext, d_corr, steps))
                     for e in per_copy]
            f.write(",\n" + ",\n".join(chunk))
            copies += 1
        f.write('\n  ],\n  "traceName": "synthesised by benchmarks/analyze_large.py"\n}\n')
    return {"copies": copies, "steps": copies * steps, "period_us": period_us,
            "events": len(once) + copies * len(per_copy), "bytes": out.stat().st_size}


def analyse(path: Path) -> tuple[dict[str, Any], float, float]:
    """(report dict, wall s, peak RSS MiB) of `gobrrr analyze --json` in a child (the
    peak is the largest child's so far: run the large trace first)."""
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "gobrrr", "analyze", str(path), "--json",
                           "-q"], capture_output=True, text=True)
    wall_s = time.perf_counter() - t0
    if proc.returncode != 0:
        raise SystemExit(f"analyze failed ({proc.returncode}): {proc.stderr[-2000:]}")
    # ru_maxrss is in KiB on Linux: the largest child's peak resident set.
    rss_mib = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    return json.loads(proc.stdout), wall_s, rss_mib


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gb", type=float, default=1.0, help="size of the trace (GB, 1e9 B)")
    ap.add_argument("--dir", type=Path, default=Path("/tmp"))
    ap.add_argument("--keep", action="store_true", help="keep the synthesised trace")
    ap.add_argument("--unmarked", action="store_true",
                    help="leave the ProfilerStep# ranges out: analyze finds the steps")
    a = ap.parse_args()
    path = a.dir / "gobrrr_analyze_large.json"
    t0 = time.perf_counter()
    made = synthesise(path, int(a.gb * 1e9), unmarked=a.unmarked)
    gen_s = time.perf_counter() - t0
    small_path = a.dir / "gobrrr_analyze_large_source.json"
    small_path.write_text(json.dumps(load_source(a.unmarked)))
    try:
        report, wall_s, rss_mib = analyse(path)
        small, _, _ = analyse(small_path)
    finally:
        small_path.unlink(missing_ok=True)
        if not a.keep:
            path.unlink(missing_ok=True)
    b, s = report["budget"], small["budget"]
    import datetime

    import ijson

    cpu = next((line.split(":", 1)[1].strip() for line in
                Path("/proc/cpuinfo").read_text().splitlines()
                if line.startswith("model name")), platform.machine())
    print(f"{datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC; {cpu}, "
          f"{os.cpu_count()} cores; python {platform.python_version()}, ijson "
          f"{ijson.__version__} ({ijson.backend})")
    marks = ("steps, their ProfilerStep# ranges left out" if a.unmarked
             else "ProfilerStep ranges")
    print(f"trace: {made['bytes'] / 1e9:.2f} GB, {made['events']:,} events, {made['steps']:,} "
          f"{marks} ({made['copies']:,} copies of {SOURCE.name}), written in {gen_s:.0f} s")
    print(f"gobrrr analyze --json: {wall_s:.1f} s wall, peak RSS {rss_mib:.0f} MiB")
    print(f"step rule: {report['workload']['trace'].get('step_rule')}")
    print(f"steps analysed: {report['workload']['trace']['steps']:,}; regime "
          f"{report['regime']} {report['fractions']}")
    print(f"per step: T_wall {b['wall_s'] * 1e6:.1f} us, busy {b['busy_s'] * 1e6:.3f} us; "
          f"the original 2-step trace: T_wall {s['wall_s'] * 1e6:.1f} us, busy "
          f"{s['busy_s'] * 1e6:.3f} us")
    if made["period_us"] is not None:
        print(f"expected per step (unmarked): T_wall {made['period_us']:.1f} us, the source "
              "steps' period, each found step running to the next's start")


if __name__ == "__main__":
    main()
