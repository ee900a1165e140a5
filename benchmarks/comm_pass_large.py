"""The communication pass (dist/commread.py) on a large rank trace: time and peak memory.

Tiles the committed H200 DDP rank-0 trace (tests/data/dist/h200_ddp_comm_rank0.json.gz:
NCCL kernels with their metadata, launches, DDP's bucket-copy ranges, trimmed of aten
ops) N times with shifted timestamps and correlation ids, each copy's window renamed
`ProfilerStep#k`, then reads it as `gobrrr analyze` does (streamed, one pass). Each
reading runs in its own process, so its peak RSS is its own.

    python benchmarks/comm_pass_large.py [TARGET_MB]      (default 1000)
"""

from __future__ import annotations

import gzip
import json
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "tests/data/dist/h200_ddp_comm_rank0.json.gz"
WINDOW = "gobrrr:dist-window"


def make(dst: Path, target_mb: float) -> int:
    doc = json.loads(gzip.open(SRC, "rt").read())
    events = doc.pop("traceEvents")
    times = [e["ts"] + e.get("dur", 0) for e in events if isinstance(e.get("ts"), (int, float))]
    span = max(times) - min(e["ts"] for e in events if isinstance(e.get("ts"), (int, float)))
    one = len(json.dumps(events))
    copies = max(1, int(target_mb * 1e6 / one))
    with dst.open("w") as f:
        f.write(json.dumps(doc)[:-1] + ', "traceEvents": [')
        first = True
        for k in range(copies):
            for e in events:
                e2 = dict(e)
                if isinstance(e2.get("ts"), (int, float)):
                    e2["ts"] = e2["ts"] + k * (span + 1000)
                if e2.get("name") == WINDOW:
                    e2["name"] = f"ProfilerStep#{k}"
                args = e2.get("args")
                if isinstance(args, dict) and "correlation" in args:
                    e2["args"] = dict(args, correlation=args["correlation"] + k * 10**7)
                f.write(("" if first else ",") + json.dumps(e2))
                first = False
        f.write("]}")
    return copies


def read(path: str, steps: int) -> None:
    from gobrrr.dist.commread import read_trace

    t0 = time.perf_counter()
    t = read_trace(path, 0, steps, "cuda", window="ProfilerStep#")
    print(json.dumps({"seconds": time.perf_counter() - t0, "collectives": len(t.collectives),
                      "exposed_us": t.exposed_us,
                      "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))


def main() -> None:
    if len(sys.argv) > 2 and sys.argv[1] == "--read":
        read(sys.argv[2], int(sys.argv[3]))
        return
    target_mb = float(sys.argv[1]) if len(sys.argv) > 1 else 1000.0
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "rank0.json"
        copies = make(path, target_mb)
        size_mb = path.stat().st_size / 1e6
        out = subprocess.run([sys.executable, __file__, "--read", str(path), str(3 * copies)],
                             capture_output=True, text=True, check=True).stdout
        r = json.loads(out)
    print(f"trace: {size_mb:.0f} MB ({copies} copies of {SRC.name}, 3 calls each)")
    print(f"commread.read_trace (streamed): {r['seconds']:.1f} s, peak RSS "
          f"{r['peak_rss_mb']:.0f} MB, {r['collectives']} collectives, exposed "
          f"{r['exposed_us'] / 1e3:.1f} ms")


if __name__ == "__main__":
    main()
