"""Contention for the CPU during the timed calls (issue 25, item 4): other processes'
load against the cores this process may use and torch's intra-op threads. On a shared
machine a workload whose threads outnumber the free cores waits for the CPU, and the
budget cannot tell that wait from the work: a script ran 2,053 ms a step with two threads
and 349 ms with OMP_NUM_THREADS=1 on a busy 2-core machine, and read as memory-bound.

Measured over the timed calls, not guessed from a load average (whose minute holds this
process's own past work): the machine's busy CPU time from /proc/stat, this process's
from its own CPU clock, both over the same wall time; the rest of the machine's busy
time is other processes'. Linux only (elsewhere: not measured, said so).
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from typing import Any

__all__ = ["Contention", "watch_cpu", "MARGIN_CORES", "wall_factor", "cpu_difference",
           "WALL_FACTOR_SAID"]

# Free cores short of the threads by more than this: contention worth a finding (half a
# core: a lone background process's spikes stay under it)
MARGIN_CORES = 0.5
# A wall_factor further from 1 than this (either way) is said in the verdict's evidence:
# a quarter more or less CPU (a background process's blip of 0.2 cores moves it 1.1x)
WALL_FACTOR_SAID = 1.25


@dataclass(frozen=True)
class Contention:
    cores: int  # this process may run on (its CPU affinity)
    threads: int  # torch's intra-op threads
    wall_s: float  # of the timed calls
    own_cores: float  # this process's CPU time / wall time
    other_cores: float | None  # other processes' busy CPU time / wall time (None: unknown)

    @property
    def free_cores(self) -> float | None:
        return None if self.other_cores is None else max(0.0, self.cores - self.other_cores)

    @property
    def available_cores(self) -> float | None:
        """The cores torch's threads could have had: its threads, or fewer where other
        processes held the rest (at least a tenth of a core: the process did run)."""
        free = self.free_cores
        return None if free is None else max(0.1, min(float(self.threads), free))

    @property
    def contended(self) -> bool:
        free = self.free_cores
        return free is not None and self.threads > 1 and self.threads > free + MARGIN_CORES

    def finding(self, device: str) -> str | None:
        """The report's sentence when torch's threads outnumber the free cores."""
        if not self.contended or device != "cpu":
            return None
        assert self.other_cores is not None and self.free_cores is not None
        return (f"contention: other processes kept {self.other_cores:.1f} of this "
                f"machine's {self.cores} cores busy during the timed calls, leaving "
                f"~{self.free_cores:.1f} for torch's {self.threads} threads (this process "
                f"used {self.own_cores:.1f} cores): its time includes waiting for the "
                f"CPU. Try torch.set_num_threads({max(1, int(self.free_cores))}) (or "
                "OMP_NUM_THREADS), or a quieter machine")

    def to_dict(self) -> dict[str, Any]:
        return asdict(self) | {"free_cores": self.free_cores, "contended": self.contended}


def _machine_busy_s() -> float | None:
    """Seconds of CPU time the whole machine has spent busy since boot (/proc/stat's
    first line: user, nice, system, irq, softirq, steal; idle and iowait left out)."""
    try:
        with open("/proc/stat") as f:
            fields = f.readline().split()
    except OSError:
        return None
    if not fields or fields[0] != "cpu" or len(fields) < 9:
        return None
    ticks = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
    user, nice, system, _idle, _iowait, irq, softirq, steal = (int(x) for x in fields[1:9])
    return (user + nice + system + irq + softirq + steal) / ticks


def _cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


@contextmanager
def watch_cpu() -> Iterator[list[Contention]]:
    """Measure contention over the block; the list holds its Contention after it."""
    import torch

    got: list[Contention] = []
    m0, p0, w0 = _machine_busy_s(), time.process_time(), time.perf_counter()
    try:
        yield got
    finally:
        m1, p1, w1 = _machine_busy_s(), time.process_time(), time.perf_counter()
        wall = w1 - w0
        own = (p1 - p0) / wall if wall > 0 else 0.0
        other = None
        if m0 is not None and m1 is not None and wall > 0:
            # the machine's busy time holds this process's: what is left is the others'
            other = max(0.0, (m1 - m0) - (p1 - p0)) / wall
        got.append(Contention(_cores(), torch.get_num_threads(), wall, own, other))


def wall_factor(timed: Contention | None, counted: Contention | None) -> float | None:
    """How much shorter (< 1) or longer (> 1) the timed calls would have run with the CPU
    the counted run had: the ratio of the cores available to torch's threads in the two.
    On a CPU every part of a step is CPU work, so a step's pace follows the cores it gets;
    the op times come from the counted run and T_wall from the timed calls, so where other
    processes' load differed between them, the overhead (T_wall less the ops' time) moves
    by that difference (issue 25: the same doctor run read memory-bound at 70% and
    overhead-bound at 61% on a busy 2-core machine). Approximate (a step that does not
    use all its threads gains less from more cores); None where either is unknown."""
    if timed is None or counted is None:
        return None
    a, b = timed.available_cores, counted.available_cores
    return None if a is None or b is None else a / b


def cpu_difference(timed: Contention, counted: Contention, factor: float) -> str:
    """The evidence line for a wall_factor worth saying (WALL_FACTOR_SAID)."""
    return (f"the CPU differed between the timed calls and the counted run: "
            f"{timed.available_cores:.1f} against {counted.available_cores:.1f} cores "
            f"available to torch's {timed.threads} threads (other processes: "
            f"{timed.other_cores:.1f} and {counted.other_cores:.1f} cores busy); with the "
            f"counted run's CPU T_wall would be ~{factor:.2f}x, and the shares' ranges "
            "cover that")
