"""The overlap exponent p of gains.time_floor_s, fitted on session h's reports: each
precision remedy's prediction recomputed with the time after at least
(D'^p + H^p)^(1/p), scaled as gains.py scales it (D': the busy time left, from the
reported prediction; H: the measured issue time, or host_issue.json's with the GPU
running where the held one was refused), against session g's measured single remedies.
Prints, per p (None: the reported predictions): rows within 1.5x and the misses.

    python3 overlap_fit.py
"""

import json
import tarfile
from pathlib import Path

HERE = Path(__file__).parent
ROWS = HERE / "../../session-2026-12-02g/models"
PRECISION = {"bf16_cast", "bf16_autocast", "tf32"}


def reports() -> dict[str, dict]:
    out = {}
    with tarfile.open(HERE / "reports.tar.gz") as t:
        for m in t.getmembers():
            f = t.extractfile(m) if m.isfile() and m.name.endswith(".json") else None
            if f is not None:
                out[Path(m.name).stem.removeprefix("doctor_")] = json.load(f)
    return out


def overlapped(d: float, h: float, p: float) -> float:
    return (d ** p + h ** p) ** (1 / p)


def count(reps: dict[str, dict], issue_running: dict[str, float], p: float | None,
          running_h: bool) -> tuple[int, int, list[str]]:
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
        t, busy, h = b["total_s"], b["busy_s"], b.get("host_issue_s")
        if h is None and running_h:
            h = issue_running.get(case)
        for r in d["remedies"]:
            spec, pred = r.get("spec"), r.get("predicted_speedup")
            if not spec or spec not in measured or not pred:
                continue
            if spec in PRECISION and h and p:
                left = t / pred  # T - saved, or the floor where it bound
                device_left = max(1e-9, left - b["overhead_s"])
                scale = min(1.0, t / overlapped(busy, h, p))
                pred = t / max(left, scale * overlapped(device_left, h, p))
            ratio = pred / measured[spec]
            n += 1
            if 1 / 1.5 <= ratio <= 1.5:
                within += 1
            else:
                misses.append(f"{case} {spec} {pred:.2f}/{measured[spec]:.2f}")
    return within, n, misses


def main() -> None:
    reps = reports()
    running = {r["case"]: r["host_issue_s"]
               for r in json.loads((HERE / "host_issue.json").read_text())}
    for p in (None, 1.0, 1.5, 2.0, 3.0, 4.0):
        for running_h in (False, True):
            within, n, misses = count(reps, running, p, running_h)
            print(f"p={p} H with the GPU running where refused: {running_h}: "
                  f"{within} of {n}; misses: " + "; ".join(misses))


if __name__ == "__main__":
    main()
