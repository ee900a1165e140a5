"""The cost of `gobrrr run` outside its window, on an overhead-bound CPU script (issue 22:
at most 1%). The script (written to a temporary folder) trains a 24-layer MLP of small
layers, so each step is dozens of module calls and hundreds of dispatches (what a hook
left on every module call would slow).

Built to resolve 1% on a shared 2-core virtual machine. There, separate runs of the same
process differed by 30% and more, in wall time and in CPU time alike: the virtual CPU's
speed moves with what the host runs, over seconds, and a process's CPU time moves with
it. Runs one after the other (the first version of this benchmark: whole runs, 5 rounds,
medians) cannot resolve 1% against that. So the arms run side by side, in lockstep:
- a round starts one process per arm; each runs the script up to step --time-from
  (gobrrr's window and report included), says it is ready and waits; then every thread
  of every arm's process is pinned to the same core (core r % cores in round r);
- then they take turns, one at a time, --turn steps each: a cycle gives every arm one
  turn, in an order rotated cycle by cycle; each process times its own turns (wall,
  time.perf_counter) and its CPU time over all its turns and the waits between them
  (time.process_time, every thread of the process: a thread gobrrr left running counts
  even while it runs during another arm's turn);
- within a cycle all arms see the machine within about a tenth of a second, so an arm's
  turn over plain's turn of the same cycle cancels the machine's drift; a round's figure
  for an arm is the median of those ratios over its cycles (`wall`), and its CPU time per
  step over plain's (`cpu`);
- the result for an arm is the median over the rounds (each round new processes: new
  memory layouts, new hash seeds) with a 95% bootstrap interval, the rounds resampled;
  against plain, and against both plain processes (`summarize`): the two plain processes
  of one round differ by several percent (the A/A arm), so one of them alone is a noisy
  reference.
Every process runs on a terminal (a pseudo-terminal for stdout and stderr), as people run
`gobrrr run`: gobrrr's progress is shown, as it is there. The load, the other processes'
busy cores during each round (/proc/stat, less this benchmark's own), is written with it.

Arms (each the same script, the same arguments; --arms picks, DEFAULT_ARMS by default):
- plain: `python mlp_train.py`;
- plain again: the same, a second process: the A/A comparison, what two processes of
  the same command differ by here (memory layout, hash seed) with nothing else changed;
- gobrrr run: `python -m gobrrr run mlp_train.py` (window 3 + 20 + 1 + 3 steps, closed
  by step ~28; since 2026-12-02 its report made in a child process started there, which
  the lockstep waits out; the terminal report printed at the end);
- gobrrr run with live spinner: the same with the progress printer `gobrrr run` used until
  2026-12-02 (common.progress_printer: on a terminal rich's Live, whose refresh thread
  and stdout proxy stayed until the script ended): the cost that was found and removed;
- profiler only: no gobrrr code, a torch.profiler session (CPU, record_shapes, gobrrr's
  schedule: one warm-up and three active steps, the trace exported) over optimizer steps
  24-28 by a global optimizer hook, then removed: what the profiled steps alone leave;
- gobrrr imports: the script after importing what `gobrrr run` loads in the script's
  process (GOBRRR_IMPORTS), nothing run: what loading them alone does to the loop;
- report in process: the profiler-only arm, then gobrrr's analysis of its trace in the
  same process: what `gobrrr run` did before its report moved to a child process.

  python benchmarks/run_overhead.py [--rounds 20] [--steps 500] [--turn 20] [--arms A,B]
                                    [--out F.json]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import pty
import random
import statistics
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
from pathlib import Path
from typing import Any

# The script: after step `time_from` it writes one byte on `done` (ready) and from then on
# runs `turn` steps each time it reads one byte on `go`, answering on `done` after each.
SCRIPT = textwrap.dedent('''
    import json, os, sys, time, torch
    from torch import nn
    steps, time_from, turn = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
    go, done, out = int(sys.argv[4]), int(sys.argv[5]), sys.argv[6]
    torch.set_num_threads(1)
    torch.manual_seed(0)
    model = nn.Sequential(*[m for _ in range(24) for m in (nn.Linear(64, 64), nn.ReLU())])
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    x = torch.randn(16, 64)
    turns = []
    for step in range(steps):
        if step >= time_from and (step - time_from) % turn == 0:
            if step == time_from:
                os.write(done, b"r")
            else:
                turns.append(time.perf_counter() - t0)
                os.write(done, b"d")
            os.read(go, 1)
            t0 = time.perf_counter()
            if step == time_from:
                cpu0 = time.process_time()
        model(x).square().mean().backward()
        opt.step()
        opt.zero_grad()
    turns.append(time.perf_counter() - t0)
    cpu_s = time.process_time() - cpu0
    json.dump({"turn_s": turns, "cpu_s": cpu_s, "steps": steps - time_from}, open(out, "w"))
    os.write(done, b"d")
''')

# Imported before the script in the "gobrrr imports" arm: what `gobrrr run` loads in the
# script's process (its command, the window's hooks, its progress lines; the report is
# made in a child process since 2026-12-02, so the trace source, the one end and the
# renderers are no longer loaded there), with no hook installed and nothing run: what
# loading them alone does to the loop. Until 2026-12-02 (run_overhead_arms5.json) it was
# "gobrrr.script, gobrrr.tracefile.analysis, gobrrr.diagnosis, gobrrr.show.report_html,
# numpy, rich.console, jinja2".
GOBRRR_IMPORTS = "gobrrr.cli.run, gobrrr.script, torch.profiler, rich.console"

IMPORTS = (f"import runpy, sys\nimport {GOBRRR_IMPORTS}  # noqa\nsys.argv = sys.argv[1:]\n"
           "runpy.run_path(sys.argv[0], run_name='__main__')\n")

PROFILER = textwrap.dedent('''
    import runpy, sys, torch
    from torch.optim.optimizer import register_optimizer_step_post_hook
    from torch.profiler import ProfilerActivity, profile, schedule
    state = {"n": 0, "prof": None}
    def hook(*_):
        state["n"] += 1
        if state["n"] == 24:
            state["prof"] = profile(
                activities=[ProfilerActivity.CPU], record_shapes=True,
                schedule=schedule(wait=0, warmup=1, active=3, repeat=1),
                on_trace_ready=lambda p: p.export_chrome_trace(sys.argv[-1] + ".trace"))
            state["prof"].start()
        elif 24 < state["n"] <= 28:
            state["prof"].step()
            if state["n"] == 28:
                state["prof"].stop()
                handle.remove()
    handle = register_optimizer_step_post_hook(hook)
    sys.argv = sys.argv[1:]
    runpy.run_path(sys.argv[0], run_name="__main__")
''')

# The profiler-only arm, then gobrrr's analysis of that trace in the same process (what
# `gobrrr run` does when its window closes: read the trace, the cached ceilings, the
# analysis), with none of gobrrr run's hooks: what making the report leaves behind.
REPORT_IN_PROCESS = PROFILER.replace(
    "            handle.remove()\n",
    "            handle.remove()\n"
    "            from gobrrr.hardware import calibrate\n"
    "            from gobrrr.tracefile.analysis import analyse_trace\n"
    "            from gobrrr.tracefile.read import read_header\n"
    "            from gobrrr.tracefile.columns import stream_trace\n"
    "            path = sys.argv[-1] + '.trace'\n"
    "            cols = stream_trace(path)\n"
    "            analyse_trace(read_header(path), calibrate('cpu'), lambda m: None, "
    "cols=cols)\n")
assert REPORT_IN_PROCESS != PROFILER

SPINNER = textwrap.dedent('''
    import sys
    import gobrrr.cli.run as run
    from gobrrr.cli.common import progress_printer
    from gobrrr.cli import main
    run.progress_lines = progress_printer  # on a terminal: rich's Live, as before 2026-12-02
    sys.argv = ["gobrrr", "run", *sys.argv[1:]]
    main()
''')


ARMS = ("plain", "plain again", "gobrrr run", "gobrrr run with live spinner", "profiler only",
        "gobrrr imports", "report in process")
# Four processes a round keep 20 rounds under 15 minutes on a 2-core machine with other
# processes keeping 1.3 of its cores busy (2026-12-02); the spinner (removed) and the
# imports (not a cost: results/cpu/run_overhead_arms.json) on --arms.
DEFAULT_ARMS = ("plain", "plain again", "gobrrr run", "profiler only")


def _busy_s() -> float:
    """The machine's busy CPU seconds so far, every process's (/proc/stat)."""
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:]]
    idle = v[3] + v[4]  # idle, iowait
    return (sum(v[:8]) - idle) / os.sysconf("SC_CLK_TCK")


class _Arm:
    """One arm's process of a round: on a pseudo-terminal (drained by a thread), with its
    two lockstep pipes, writing its figures to `out`."""

    def __init__(self, cmd: list[str], env: dict[str, str], out: Path) -> None:
        self.go_r, self.go_w = os.pipe()
        self.done_r, self.done_w = os.pipe()
        self.term_main, term = pty.openpty()
        self.said: list[bytes] = []
        self.cmd = [*cmd, str(self.go_r), str(self.done_w)]
        self.out = out
        self.proc = subprocess.Popen(
            [*self.cmd, str(self.out)], stdin=subprocess.DEVNULL, stdout=term,
            stderr=term, env=env, pass_fds=(self.go_r, self.done_w))
        for fd in (term, self.go_r, self.done_w):
            os.close(fd)
        self.drain = threading.Thread(target=self._drain, daemon=True)
        self.drain.start()

    def _drain(self) -> None:
        while True:
            try:
                chunk = os.read(self.term_main, 65536)
            except OSError:  # EIO: the terminal's other end closed
                return
            if not chunk:
                return
            self.said.append(chunk)

    def wait_byte(self) -> None:
        if not os.read(self.done_r, 1):
            self.proc.wait()
            raise RuntimeError(f"{self.cmd} exited {self.proc.returncode}: "
                               f"{b''.join(self.said)[-3000:].decode(errors='replace')}")

    def pin(self, core: int) -> None:
        """Every thread of the process on `core` (a thread it starts later inherits its
        starter's)."""
        for tid in os.listdir(f"/proc/{self.proc.pid}/task"):
            os.sched_setaffinity(int(tid), {core})

    def turn(self) -> None:
        os.write(self.go_w, b"g")
        self.wait_byte()

    def finish(self) -> dict[str, Any]:
        if self.proc.wait() != 0:
            raise RuntimeError(f"{self.cmd} exited {self.proc.returncode}")
        self.drain.join()
        for fd in (self.go_w, self.done_r, self.term_main):
            os.close(fd)
        d: dict[str, Any] = json.loads(self.out.read_text())
        self.out.unlink()
        Path(str(self.out) + ".trace").unlink(missing_ok=True)
        return d


def bootstrap(ratios: list[float], n: int = 5000, seed: int = 0) -> tuple[float, float]:
    """95% interval of the median ratio, the rounds resampled with replacement."""
    rng = random.Random(seed)
    meds = sorted(statistics.median(rng.choices(ratios, k=len(ratios))) for _ in range(n))
    return meds[int(0.025 * n)], meds[int(0.975 * n) - 1]


def _children(pid: int) -> list[int]:
    """The process's child processes still running (Linux /proc; one that ended and
    that its parent has not waited for yet, a zombie, runs no more)."""
    kids: list[int] = []
    for tid in os.listdir(f"/proc/{pid}/task"):
        with contextlib.suppress(OSError):
            for c in Path(f"/proc/{pid}/task/{tid}/children").read_text().split():
                stat = Path(f"/proc/{c}/stat").read_text()
                if stat[stat.rindex(")") + 2] != "Z":
                    kids.append(int(c))
    return kids


def one_round(pre: dict[str, list[str]], args: list[str], env: dict[str, str], core: int,
              cycles: int, tmp: Path) -> dict[str, Any]:
    """Every arm's process side by side, in lockstep once all are ready and no arm's
    child process runs (`gobrrr run`'s report, made in a child since 2026-12-02: its few
    seconds beside the script are not what this measures) (module docstring): each arm's
    turns, CPU time, the cycles' orders, and how long the lockstep waited for children."""
    arms = list(pre)
    procs = {k: _Arm([*cmd, *args], env, tmp / f"arm{i}.json")
             for i, (k, cmd) in enumerate(pre.items())}
    for p in procs.values():
        p.wait_byte()  # ready: at step time_from
        p.pin(core)
    t_kids = time.perf_counter()
    while any(_children(p.proc.pid) for p in procs.values()):
        if time.perf_counter() - t_kids > 300:
            raise RuntimeError("an arm's child process still runs after 300 s")
        time.sleep(0.05)
    children_s = time.perf_counter() - t_kids
    b0, c0, w0 = _busy_s(), time.process_time(), time.perf_counter()
    orders = []
    for j in range(cycles):
        order = arms[j % len(arms):] + arms[:j % len(arms)]
        orders.append(order)
        for k in order:
            procs[k].turn()
    busy, mine, wall = _busy_s() - b0, time.process_time() - c0, time.perf_counter() - w0
    got = {k: p.finish() for k, p in procs.items()}
    # the machine's busy time less the arms' (over the lockstep) and this driver's
    other = max(0.0, busy - mine - sum(d["cpu_s"] for d in got.values())) / wall
    return {"core": core, "lockstep_s": wall, "other_busy_cores": other,
            "waited_for_children_s": children_s,
            "turn_s": {k: d["turn_s"] for k, d in got.items()},
            "cpu_step_s": {k: d["cpu_s"] / d["steps"] for k, d in got.items()},
            "orders": orders}


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--rounds", type=int, default=20)
    p.add_argument("--steps", type=int, default=500)
    p.add_argument("--time-from", type=int, default=100)
    p.add_argument("--turn", type=int, default=20)
    p.add_argument("--arms", default=",".join(DEFAULT_ARMS),
                   help=f"plain and any of: {', '.join(ARMS[1:])}")
    p.add_argument("--out", default=None)
    p.add_argument("--summarize", metavar="F.json", default=None,
                   help="only summarize a saved result again (written back to it)")
    a = p.parse_args()
    if a.summarize:
        saved = json.loads(Path(a.summarize).read_text())
        summarize(saved)
        Path(a.summarize).write_text(json.dumps(saved, indent=1) + "\n")
        return
    assert (a.steps - a.time_from) % a.turn == 0, "--steps - --time-from: whole turns"
    cycles = (a.steps - a.time_from) // a.turn
    tmp = Path(tempfile.mkdtemp(prefix="gobrrr-overhead-"))
    script = tmp / "mlp_train.py"
    script.write_text(SCRIPT)
    env = dict(os.environ, XDG_CACHE_HOME=str(tmp / "cache"))
    for name, text in (("imports.py", IMPORTS), ("profiler.py", PROFILER),
                       ("spinner.py", SPINNER), ("report.py", REPORT_IN_PROCESS)):
        (tmp / name).write_text(text)
    py = sys.executable
    every = {"plain": [py], "plain again": [py], "gobrrr run": [py, "-m", "gobrrr", "run"],
             "gobrrr run with live spinner": [py, str(tmp / "spinner.py")],
             "profiler only": [py, str(tmp / "profiler.py")],
             "gobrrr imports": [py, str(tmp / "imports.py")],
             "report in process": [py, str(tmp / "report.py")]}
    arms = ["plain", *[k for k in a.arms.split(",") if k != "plain"]]
    pre = {k: every[k] for k in arms}
    args = [str(script), str(a.steps), str(a.time_from), str(a.turn)]
    cores = sorted(os.sched_getaffinity(0))
    t_start = time.perf_counter()
    # round 0 calibrates (gobrrr's report needs this machine's ceilings) and warms the
    # disk cache, one process at a time: dropped
    for k in ("plain", "gobrrr run"):
        one_round({k: pre[k]}, args, env, cores[0], cycles, tmp)
    rounds = []
    for r in range(1, a.rounds + 1):
        got = one_round(pre, args, env, cores[r % len(cores)], cycles, tmp)
        plain = got["turn_s"]["plain"]
        got["wall_vs_plain"] = {k: statistics.median(
            t / b for t, b in zip(got["turn_s"][k], plain, strict=True)) for k in arms[1:]}
        got["cpu_vs_plain"] = {k: got["cpu_step_s"][k] / got["cpu_step_s"]["plain"]
                               for k in arms[1:]}
        rounds.append(got)
        print(f"round {r} ({time.perf_counter() - t_start:.0f} s; core {got['core']}, "
              f"others busy {got['other_busy_cores']:.2f} cores; plain "
              f"{1e3 * statistics.median(plain) / a.turn:.3f} ms/step): "
              + ", ".join(f"{k} {100 * (got['wall_vs_plain'][k] - 1):+.2f}%/"
                          f"{100 * (got['cpu_vs_plain'][k] - 1):+.2f}%" for k in arms[1:])
              + " (wall/CPU vs plain)", flush=True)
    loads = [g["other_busy_cores"] for g in rounds]
    result = {
        "steps": a.steps, "time_from": a.time_from, "turn_steps": a.turn,
        "cycles": cycles, "rounds": a.rounds, "arms": arms,
        "gobrrr_imports": GOBRRR_IMPORTS,
        "stats": {"wall": "per round, the median over the cycles of the arm's turn over "
                          "plain's turn of the same cycle (wall time)",
                  "cpu": "per round, the arm's process CPU time per step over the "
                         "lockstep (all its threads, the waits included) over plain's"},
        "median_step_ms": {k: 1e3 * statistics.median(
            statistics.median(g["turn_s"][k]) for g in rounds) / a.turn for k in arms},
        "other_busy_cores": {"median": statistics.median(loads), "min": min(loads),
                             "max": max(loads)},
        "benchmark_s": time.perf_counter() - t_start,
        "python": sys.version.split()[0], "torch": __import__("torch").__version__,
        "cpus": len(cores),
        "per_round": [{k: v for k, v in g.items() if k not in ("turn_s", "orders")}
                      for g in rounds]}
    summarize(result)
    if a.out:
        Path(a.out).write_text(json.dumps(result, indent=1) + "\n")


def summarize(result: dict[str, Any]) -> None:
    """Each arm against plain over the rounds (median, 95% bootstrap interval), into
    `result` and printed; with "plain again" also against both plain processes (a
    round's ratio over the square root of plain again's: against their geometric mean,
    which halves the reference's own variance). `--summarize F.json` runs it again on a
    saved result."""
    arms, rounds = result["arms"], result["per_round"]
    against: dict[str, dict[str, dict[str, Any]]] = {"vs_plain": {}, "vs_both_plain": {}}
    for k in arms[1:]:
        for stat in ("wall", "cpu"):
            by = {"vs_plain": [g[f"{stat}_vs_plain"][k] for g in rounds]}
            if "plain again" in arms and k != "plain again":
                by["vs_both_plain"] = [g[f"{stat}_vs_plain"][k] / math.sqrt(
                    g[f"{stat}_vs_plain"]["plain again"]) for g in rounds]
            for ref, ratios in by.items():
                lo, hi = bootstrap(ratios)
                against[ref].setdefault(k, {})[stat] = {
                    "slower_by": statistics.median(ratios) - 1,
                    "interval_95": [lo - 1, hi - 1],
                    "rounds_slower_by": [x - 1 for x in ratios]}
    result.update(against)
    load = result["other_busy_cores"]
    print(f"{result['rounds']} rounds of {result['cycles']} cycles, other processes busy "
          f"{load['median']:.2f} cores (median; {load['min']:.2f}-{load['max']:.2f}); "
          "median of the rounds [95% bootstrap interval]:")
    for ref, by_arm in against.items():
        for k, s in by_arm.items():
            print(f"  {k} {ref}: " + ", ".join(
                f"{stat} {100 * v['slower_by']:+.2f}% [{100 * v['interval_95'][0]:+.2f}%, "
                f"{100 * v['interval_95'][1]:+.2f}%]" for stat, v in s.items()))


if __name__ == "__main__":
    main()
