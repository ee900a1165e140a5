"""The script's steps right after `gobrrr run`'s window, while the report's child process
(cli/run_report.py) runs beside it, on a CPU script bound by its input pipeline
(run_scripts/train_cpu_loader.py: num_workers=0, per-sample torch transforms on torch's
intra-op threads, a small CNN). On the H200 (16 cores) the ResNet-50 script's wait for
its batch went from ~0.17 s to a median ~1.1 s for the ~13 steps after the window while
the child ran (docs/run.md, "The cost after the window"); this reproduces it on a CPU
machine and compares the child's priority settings.

Arms (each a new process; a round runs every arm once, in a shuffled order):
- plain: `python train_cpu_loader.py`;
- before: `gobrrr run` with the child as it was until 2026-12-02: the analysis imported
  at the script's priority, then os.nice(10);
- sched_idle: the child under SCHED_IDLE from its first line, nothing else;
- nice19_autogroup: nice 19 and its session's autogroup at nice 19 from its first line,
  no SCHED_IDLE;
- now: `gobrrr run` as it is (run_report.lower_priority: SCHED_IDLE from the first
  line, and the child's own session's autogroup at nice 19);
- before_same, nice19_same, sched_idle_same, now_same (not run by default): the same
  with the child in the script's session (a process group of its own, no session), as
  where autogroups are not in effect (a process in a CPU cgroup, a kernel without
  CONFIG_SCHED_AUTOGROUP); now_same then sets SCHED_IDLE alone.
The arms replace run_report.lower_priority from a sitecustomize that runs in the child
(the script's process is the same in all; the "_same" arms change how it starts the
child); every child writes when it started and ended, its CPU time, its threads' and its
policy.

Per run: the wait for each step's batch (the script's own timing, --timing-out) and
each step's start; `base` is the median wait of steps 5-22 (before the profiled steps),
`after` the median wait of the 13 steps after the window (steps 27-39, the H200's
count), `beside` the median wait of the steps that began while the child ran (over
plain's same steps), `lost_s` the time the script took from step 27 to its end over that
many steps at its own median step time of steps 5-22 (and that time over plain's of the
same round); `others` the cores other processes kept busy during the run (/proc/stat,
less this benchmark's processes). The machine is shared: each run starts once other
processes keep fewer than --quiet-below cores busy (over 2 s), and the summary leaves
out the runs they kept --noisy-above cores busy.

  python benchmarks/run_after_window_cpu.py [--rounds 6] [--steps 87] [--arms A,B]
                                            [--quiet-below 0.3] [--noisy-above 0.5]
                                            [--out F.json]
  python benchmarks/run_after_window_cpu.py --summary F.json
  python benchmarks/run_after_window_cpu.py --share 5    # each priority's share of a core
                                                          # beside a plain busy loop
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
SCRIPT = HERE / "run_scripts" / "train_cpu_loader.py"
ROOT = HERE.parent
WINDOW = 27  # 3 warm-up + 20 timed + 1 + 3 profiled: the window closes after step 26
AFTER = 13
ARMS = ("plain", "before", "sched_idle", "nice19_autogroup", "now")
SAME_ARMS = ("before_same", "nice19_same", "sched_idle_same", "now_same")

# Runs in every process started with its folder on PYTHONPATH. In the report's child:
# sets the arm's priority in place of run_report.lower_priority, runs the child and
# writes its log. In `gobrrr run`'s own process, for an arm ending in "_same": the child
# is started in the script's session (its own process group, as Ctrl-C needs, but no
# session and so no autogroup of its own), as where autogroups are not in effect.
SITE = textwrap.dedent('''
    import os, sys, time
    _arm = os.environ.get("BENCH_CHILD_ARM")
    if _arm is not None and "gobrrr.cli.run_report" not in sys.orig_argv \\
            and _arm.endswith("_same"):
        import subprocess

        class _SameSession(subprocess.Popen):
            def __init__(self, args, *a, **k):
                if k.get("start_new_session") and "gobrrr.cli.run_report" in args:
                    k["start_new_session"], k["process_group"] = False, 0
                super().__init__(args, *a, **k)

        subprocess.Popen = _SameSession
    if _arm is not None and "gobrrr.cli.run_report" in sys.orig_argv:
        _t0 = time.time()
        import json
        from pathlib import Path
        import gobrrr.cli.run_report as rr
        args = sys.orig_argv[sys.orig_argv.index("gobrrr.cli.run_report") + 1:]
        _own = os.getsid(0) == os.getpid()
        _base = _arm.removesuffix("_same")
        if _base == "before":  # the analysis imported at the script's priority, then nice 10
            import pickle
            import gobrrr.cli.run, gobrrr.errors, gobrrr.script_report, gobrrr.show.files
            os.nice(10)
            rr.lower_priority = lambda: []
        elif _base in ("nice19", "nice19_autogroup"):
            def _nice():
                os.nice(19)
                if _base == "nice19_autogroup" and _own:
                    open("/proc/self/autogroup", "w").write("19")
                return ["nice 19"]
            rr.lower_priority = _nice
        elif _base == "sched_idle":
            def _idle():
                os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))
                return ["SCHED_IDLE"]
            rr.lower_priority = _idle
        code = rr.main(args)
        tick = os.sysconf("SC_CLK_TCK")
        threads = []
        for t in os.listdir("/proc/self/task"):
            f = open(f"/proc/self/task/{t}/stat").read().rsplit(")", 1)[1].split()
            threads.append((int(f[11]) + int(f[12])) / tick)
        c = os.times()
        log = {"start": _t0, "end": time.time(), "cpu_s": c.user + c.system,
               "threads_cpu_s": sorted(threads, reverse=True),
               "policy": os.sched_getscheduler(0), "nice": os.nice(0),
               "autogroup": open("/proc/self/autogroup").read().strip(),
               "own_session": _own, "code": code}
        Path(os.environ["BENCH_CHILD_LOG"]).write_text(json.dumps(log))
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
''')


# --share: a busy loop pinned to core 0 at `mode`'s priority beside a plain one; prints
# the share of the core each got.
LOOP = textwrap.dedent('''
    import os, sys, time
    mode = sys.argv[1]
    os.sched_setaffinity(0, {0})
    if "sched_idle" in mode:
        os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))
    if "nice" in mode:
        os.nice(int(mode.split("nice")[1].split("_")[0]))
    if "autogroup" in mode and os.getsid(0) == os.getpid():
        open("/proc/self/autogroup", "w").write("19")
    t0, c0 = time.time(), time.process_time()
    while time.time() - t0 < 3:
        pass
    print(round((time.process_time() - c0) / 3, 3))
''')
SHARE_MODES = (("nice10", False), ("nice19", False), ("sched_idle", False),
               ("nice10", True), ("nice19", True), ("sched_idle", True),
               ("nice19_autogroup", True), ("sched_idle_autogroup", True))


def share(rounds: int) -> list[str]:
    """Each mode's share of one core beside a plain busy loop, in the plain loop's session
    or in a session of its own (autogroups: where the kernel shares CPU time out by
    session first); medians [ranges] over `rounds`."""
    lines = ["mode | session | its share | the plain loop's share"]
    for mode, own in SHARE_MODES:
        got: list[tuple[float, float]] = []
        for _ in range(rounds):
            wait_for_quiet(0.3)
            plain = subprocess.Popen([sys.executable, "-c", LOOP, "plain"],
                                     stdout=subprocess.PIPE, text=True)
            other = subprocess.Popen([sys.executable, "-c", LOOP, mode],
                                     stdout=subprocess.PIPE, text=True,
                                     start_new_session=own)
            got.append((float(other.communicate()[0]), float(plain.communicate()[0])))
        lines.append(f"{mode} | {'its own' if own else 'the same'} | "
                     f"{_med([g[0] for g in got], '.2f')} | {_med([g[1] for g in got], '.2f')}")
    return lines


def _busy_s() -> float:
    """The machine's busy CPU seconds so far, every process's (/proc/stat)."""
    with open("/proc/stat") as f:
        fields = f.readline().split()
    user, nice, system, _idle, _iowait, irq, softirq, steal = (int(x) for x in fields[1:9])
    return (user + nice + system + irq + softirq + steal) / os.sysconf("SC_CLK_TCK")


def _own_s() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def wait_for_quiet(below: float, most_s: float = 600.0) -> float:
    """Waits (at most `most_s`) until the other processes keep fewer than `below` cores
    busy over 2 s (this machine is shared); the seconds waited."""
    t0 = time.time()
    while time.time() - t0 < most_s:
        busy0 = _busy_s()
        time.sleep(2.0)
        if (_busy_s() - busy0) / 2.0 < below:
            break
    return time.time() - t0


def one_run(arm: str, steps: int, folder: Path, site: Path) -> dict[str, Any]:
    timing, log, report = folder / "timing.json", folder / "child.json", folder / "r.json"
    for f in (timing, log, report):
        f.unlink(missing_ok=True)
    env = dict(os.environ, PYTHONPATH=str(site), BENCH_CHILD_LOG=str(log))
    if arm != "plain":
        env["BENCH_CHILD_ARM"] = arm  # "now": logged, lower_priority left as it is
    gobrrr = [] if arm == "plain" else ["-m", "gobrrr", "run", "-q", "--json", str(report)]
    cmd = [sys.executable, *gobrrr, str(SCRIPT), "--steps", str(steps), "--timing-out",
           str(timing)]
    busy0, own0, t0 = _busy_s(), _own_s(), time.time()
    r = subprocess.run(cmd, cwd=folder, env=env, capture_output=True, text=True)
    wall = time.time() - t0
    others = ((_busy_s() - busy0) - (_own_s() - own0)) / wall
    if r.returncode != 0:
        raise SystemExit(f"{arm}: exit {r.returncode}\n{r.stderr[-3000:]}")
    d = json.loads(timing.read_text())
    waits, starts = d["waits_s"], d["starts"]
    step_s = statistics.median(b - a for a, b in zip(starts[5:23], starts[6:24], strict=True))
    out: dict[str, Any] = {
        "arm": arm, "wall_s": wall, "others_cores": others, "waits_s": waits,
        "base_s": statistics.median(waits[5:23]),
        "after_s": statistics.median(waits[WINDOW:WINDOW + AFTER]),
        "step_s": step_s,
        "lost_s": (d["end"] - starts[WINDOW]) - (len(starts) - WINDOW) * step_s,
        "script_end": d["end"], "window_end": starts[WINDOW], "starts": starts}
    if arm != "plain":
        c = json.loads(log.read_text())
        out["child"] = c | {
            "wall_s": c["end"] - c["start"],
            "steps_beside": sum(1 for s in starts[WINDOW:] if s < c["end"]),
            "after_script_end_s": c["end"] - d["end"]}
    return out


def _med(values: list[float], fmt: str) -> str:
    """The median, and the range in brackets, of `values` ("-" for none)."""
    if not values:
        return "-"
    return (f"{format(statistics.median(values), fmt)} "
            f"[{format(min(values), fmt)}, {format(max(values), fmt)}]")


def _beside(r: dict[str, Any], plain: dict[str, Any] | None = None) -> tuple[float, float]:
    """The median wait of the steps that began while `r`'s child ran (from the window's
    end; at least one), and of the same steps in `plain`'s run."""
    n = max(1, r["child"]["steps_beside"])
    same = (plain or r)["waits_s"][WINDOW:WINDOW + n]
    return statistics.median(r["waits_s"][WINDOW:WINDOW + n]), statistics.median(same)


def _post(r: dict[str, Any]) -> float:
    """The script's time from the window's end (step 27's start) to its end."""
    return float(r["script_end"] - r["window_end"])


def summarize(all_runs: list[dict[str, Any]], arms: list[str], noisy: float) -> list[str]:
    """One line per arm, medians [ranges] over the runs during which other processes
    kept fewer than `noisy` cores busy (the others listed)."""
    runs = [r for r in all_runs if r["others_cores"] < noisy]
    left = [f"round {r['round']} {r['arm']} ({r['others_cores']:.2f} cores)"
            for r in all_runs if r["others_cores"] >= noisy]
    lines = [f"left out, other processes at {noisy} cores or more: "
             f"{', '.join(left) or 'none'}",
             "arm | runs | base wait | wait, 13 steps after | after/base | after over "
             "plain's (same round) | wait, steps beside the child | over plain's same "
             "steps | time lost after the window | time after the window over plain's | "
             "child wall | child CPU | "
             "child ended after the script | others' cores"]
    rounds = max(r["round"] for r in all_runs) + 1
    plain = {r["round"]: r for r in runs if r["arm"] == "plain"}
    for arm in arms:
        rs = [r for r in runs if r["arm"] == arm]
        if not rs:
            continue
        ch = [r["child"] for r in rs if "child" in r]
        cells = [
            f"{arm}", f"{len(rs)}/{rounds}",
            _med([r["base_s"] for r in rs], ".3f"), _med([r["after_s"] for r in rs], ".3f"),
            _med([r["after_s"] / r["base_s"] for r in rs], ".2f"),
            _med([r["after_s"] / plain[r["round"]]["after_s"] for r in rs
                  if r["round"] in plain], ".2f"),
            _med([_beside(r)[0] for r in rs if "child" in r], ".3f"),
            _med([_beside(r)[0] / _beside(r, plain[r["round"]])[1] for r in rs
                  if "child" in r and r["round"] in plain], ".2f"),
            _med([r["lost_s"] for r in rs], "+.2f"),
            _med([_post(r) / _post(plain[r["round"]]) for r in rs if r["round"] in plain],
                 ".3f"),
            _med([c["wall_s"] for c in ch], ".1f"), _med([c["cpu_s"] for c in ch], ".1f"),
            _med([c["after_script_end_s"] for c in ch], "+.1f"),
            _med([r["others_cores"] for r in rs], ".2f")]
        lines.append(" | ".join(cells))
    return lines


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--rounds", type=int, default=6)
    p.add_argument("--steps", type=int, default=87)
    p.add_argument("--arms", default=",".join(ARMS))
    p.add_argument("--out", type=Path, default=None)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--quiet-below", type=float, default=0.3,
                   help="before each run, wait until other processes keep fewer cores "
                        "busy than this (0: do not wait)")
    p.add_argument("--noisy-above", type=float, default=0.5,
                   help="leave out of the summary the runs during which other processes "
                        "kept this many cores busy or more")
    p.add_argument("--summary", type=Path, default=None,
                   help="summarize the runs of an --out file, run nothing")
    p.add_argument("--share", type=int, default=0, metavar="ROUNDS",
                   help="only the two-loop test of the priorities' shares of a core")
    a = p.parse_args()
    arms = a.arms.split(",")
    if a.share:
        print("\n".join(share(a.share)))
        return
    if a.summary:
        runs = json.loads(a.summary.read_text())["runs"]
        present = list(dict.fromkeys(r["arm"] for r in runs))
        order = [x for x in (*ARMS, *SAME_ARMS) if x in present]
        print("\n".join(summarize(runs, order + [x for x in present if x not in order],
                                   a.noisy_above)))
        return
    rng = random.Random(a.seed)
    runs: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="gobrrr-after-window-") as tmp:
        folder = Path(tmp)
        site = folder / "site"
        site.mkdir()
        (site / "sitecustomize.py").write_text(SITE)
        for rnd in range(a.rounds):
            order = arms[:]
            rng.shuffle(order)
            for arm in order:
                waited = wait_for_quiet(a.quiet_below) if a.quiet_below > 0 else 0.0
                r = one_run(arm, a.steps, folder, site) | {"round": rnd, "waited_s": waited}
                runs.append(r)
                c = r.get("child", {})
                print(f"round {rnd} {arm}: base {r['base_s']:.3f} s, after "
                      f"{r['after_s']:.3f} s, lost {r['lost_s']:+.2f} s, others "
                      f"{r['others_cores']:.2f} cores" + (
                          f"; child {c['wall_s']:.1f} s wall, {c['cpu_s']:.1f} s CPU, "
                          f"{c['steps_beside']} steps beside it, ended "
                          f"{c['after_script_end_s']:+.1f} s after the script, policy "
                          f"{c['policy']} nice {c['nice']} {c['autogroup']}" if c else ""),
                      flush=True)
            if a.out:
                a.out.write_text(json.dumps({"date": time.strftime("%Y-%m-%d"),
                                             "machine": f"{os.cpu_count()} cores",
                                             "steps": a.steps, "runs": runs}, indent=1))
    print("\n".join(summarize(runs, arms, a.noisy_above)))


if __name__ == "__main__":
    main()
