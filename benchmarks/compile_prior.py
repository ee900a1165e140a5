"""The CUDA compile prior (remedies/plan.COMPILE_BASE_S / COMPILE_PER_OP_S) against every
first cold compile the committed optimize logs hold.

A search's first compile is estimated from the prior ("... before any compile") where
the machine has no record yet, which the GPU machines of these sessions never had (each
starts bare); the runner prints the estimate beside the measured seconds. This reads
those lines from the logs under benchmarks/results, takes the mode's factor out (the
seconds the default mode would take, as plan.compile_prep_s compares them), and prints a
markdown table with the current prior's estimate for each.

    python benchmarks/compile_prior.py [ROOT] > benchmarks/results/compile_prior.md
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

from gobrrr.remedies.plan import COMPILE_BASE_S, COMPILE_PER_OP_S

# "compile: estimated ~130.3 s (15 s + 936 ops x 0.1 s x 1.2 (reduce-overhead), before
# any compile), measured 24.2 s" (lines wrapped by the terminal)
LINE = re.compile(
    r"compile: estimated ~(?P<est>[\d.]+) s \((?P<base>[\d.]+) s \+ (?P<ops>\d+) ops x "
    r"(?P<per>[\d.]+) s(?: x (?P<factor>[\d.]+) +\((?P<mode>[^)]*)\))?, before any "
    r"compile\), measured (?P<meas>[\d.]+) s")


def rows(root: Path) -> list[dict[str, object]]:
    out: list[dict[str, object]] = []
    for log in sorted(root.rglob("*.log")):
        text = re.sub(r"\s+", " ", log.read_text(errors="replace").replace("gobrrr: ", ""))
        for m in LINE.finditer(text):
            factor = float(m["factor"] or 1.0)
            out.append({"log": str(log.relative_to(root)), "ops": int(m["ops"]),
                        "mode": m["mode"] or "default", "factor": factor,
                        "measured_s": float(m["meas"]), "old_estimate_s": float(m["est"]),
                        "default_s": float(m["meas"]) / factor})
    return out


def main(argv: list[str]) -> int:
    root = Path(argv[0]) if argv else Path(__file__).parent / "results"
    base, per = COMPILE_BASE_S["cuda"], COMPILE_PER_OP_S["cuda"]
    found = [r for r in rows(root) if "/cpu/" not in str(r["log"])]
    print(f"# The CUDA compile prior against the first cold compiles logged\n\n"
          f"`benchmarks/compile_prior.py`: every \"before any compile\" estimate in the "
          f"logs under `benchmarks/results` (H100 and H200 machines, torch 2.11), the "
          f"mode's factor taken out (\"default s\"), against the prior now: "
          f"{base:g} s + {per:g} s per op.\n")
    print("| log | ops | mode | measured s | default s | estimated then s | prior now s | "
          "now / default |\n|---|---|---|---|---|---|---|---|")
    for r in sorted(found, key=lambda r: (r["ops"], r["log"])):
        now = base + per * float(r["ops"])  # type: ignore[arg-type]
        print(f"| {r['log']} | {r['ops']} | {r['mode']} | {r['measured_s']:.1f} | "
              f"{r['default_s']:.1f} | {r['old_estimate_s']:.1f} | {now:.1f} | "
              f"{now / float(r['default_s']):.2f} |")  # type: ignore[arg-type]
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
