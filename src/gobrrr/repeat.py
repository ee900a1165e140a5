"""`gobrrr doctor --repeat N`: T_wall of the same command in N - 1 more fresh processes,
so a report carries what varies between runs (issue 25, item 5).

Why processes, not more timing rounds in this one: on this project's shared 2-core CPU
the runs of one workload fell into modes per process (a memory-bound chain over 4 MiB
tensors took 0.8 ms a call in some processes and 40 ms in others: the allocator either
reused its pages or faulted fresh ones each call), and three timing rounds inside one
process agreed with each other while two processes differed tenfold: rounds in one
process would have read a process's mode as a code change (benchmarks/results/cpu/
gate_pairs.json). Each child is `python -m gobrrr doctor TARGET ... --no-experiments
--json -q` with the parent's target and options; only its T_wall is kept.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable, Sequence

from gobrrr.errors import UserError

__all__ = ["child_walls", "CHILD_TIMEOUT_S"]

CHILD_TIMEOUT_S = 900.0  # one child's whole doctor run, imports and model build included


def child_walls(args: Sequence[str], n: int, progress: Callable[[str], None] | None = None,
                timeout_s: float = CHILD_TIMEOUT_S) -> list[float]:
    """T_wall (timing.median_s) of `gobrrr doctor *args` in `n` fresh processes, one after
    another. A child that fails is one line (UserError) naming its last error line."""
    say = progress or (lambda _m: None)
    out = []
    for i in range(n):
        say(f"--repeat: run {i + 2} of {n + 1} in a fresh process")
        cmd = [sys.executable, "-m", "gobrrr", "doctor", *args, "--no-experiments",
               "--json", "-q"]
        try:
            p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s,
                               stdin=subprocess.DEVNULL)
        except subprocess.TimeoutExpired:
            raise UserError(f"--repeat: run {i + 2} took over {timeout_s:.0f} s") from None
        if p.returncode != 0:
            last = next((x for x in reversed(p.stderr.splitlines()) if x.strip()), "")
            raise UserError(f"--repeat: run {i + 2} failed (exit {p.returncode}): "
                            f"{last[:300]}")
        out.append(float(json.loads(p.stdout)["timing"]["median_s"]))
    return out
