"""The cost of `gobrrr run` outside its window, on an overhead-bound CPU script (issue 22:
at most 1%). The script (written to a temporary folder) trains a 24-layer MLP of small
layers, so each step is dozens of module calls and hundreds of dispatches (what a hook
left on every module call would slow), and times its own steps from --time-from on.
Four ways alternate, ROUNDS times:
- plain: `python mlp_train.py`;
- control: the same script run by runpy after importing 17 standard-library packages it
  never uses (`CONTROL`): what a process's history alone, with nothing left running, does
  to a loop this tight (memory layout: on this 2-core CPU it was 0.25% slower in one run
  and 1.5% in another; in-process probes found a torch.profiler session beforehand made
  the loop ~2% faster). Differences of a few percent here are not all gobrrr's;
- gobrrr imports: the same after importing what `gobrrr run` loads for its report
  (GOBRRR_IMPORTS), nothing else: the share of the cost that loading them alone makes;
- gobrrr run: `python -m gobrrr run -q mlp_train.py` (window 3 + 20 + 1 + 3 steps, ended
  by step ~30);
- profiler only: the script with no gobrrr code, a torch.profiler session (CPU,
  record_shapes) started at its 24th optimizer step and stopped at its 28th by a global
  optimizer hook then removed: what the profiled steps alone leave behind;
- gobrrr run, no report: `gobrrr run` with the report not made when the window closes
  (gobrrr.script._report replaced): what everything but the report leaves behind.
The medians and their ratios are printed and written as JSON.

  python benchmarks/run_overhead.py [--rounds 5] [--steps 6000] [--out F.json]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

SCRIPT = textwrap.dedent('''
    import json, sys, time, torch
    from torch import nn
    steps, time_from, out = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
    torch.set_num_threads(1)
    torch.manual_seed(0)
    model = nn.Sequential(*[m for _ in range(24) for m in (nn.Linear(64, 64), nn.ReLU())])
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    x = torch.randn(16, 64)
    for step in range(steps):
        if step == time_from:
            t0 = time.perf_counter()
        model(x).square().mean().backward()
        opt.step()
        opt.zero_grad()
    json.dump({"steps_per_s": (steps - time_from) / (time.perf_counter() - t0)}, open(out, "w"))
''')


# Imported before the script in the control: packages it never uses.
CONTROL = ("asyncio, email.mime.multipart, http.client, xml.dom.minidom, json, decimal, "
           "statistics, fractions, html, argparse, logging, unittest, sqlite3, csv, tarfile, "
           "zipfile, configparser")


# Imported before the script in the "gobrrr imports" arm: what `gobrrr run` loads to make
# its report when the window closes (the trace source, the one end, numpy, rich, jinja2),
# with no hook installed and nothing run: what loading them alone does to the loop.
GOBRRR_IMPORTS = ("gobrrr.script, gobrrr.tracefile.analysis, gobrrr.diagnosis, "
                  "gobrrr.show.report_html, numpy, rich.console, jinja2")


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--steps", type=int, default=6000)
    p.add_argument("--time-from", type=int, default=100)
    p.add_argument("--out", default=None)
    a = p.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="gobrrr-overhead-"))
    script = tmp / "mlp_train.py"
    script.write_text(SCRIPT)
    env = dict(os.environ, XDG_CACHE_HOME=str(tmp / "cache"))
    control = (f"import runpy, sys\nimport {CONTROL}  # noqa\nsys.argv = sys.argv[1:]\n"
               "runpy.run_path(sys.argv[0], run_name='__main__')\n")
    (tmp / "control.py").write_text(control)
    imports = (f"import runpy, sys\nimport {GOBRRR_IMPORTS}  # noqa\nsys.argv = sys.argv[1:]\n"
               "runpy.run_path(sys.argv[0], run_name='__main__')\n")
    (tmp / "imports.py").write_text(imports)
    profiler = ("import runpy, sys, torch\n"
                "from torch.optim.optimizer import register_optimizer_step_post_hook\n"
                "from torch.profiler import ProfilerActivity, profile\n"
                "state = {'n': 0, 'prof': None}\n"
                "def hook(*_):\n"
                "    state['n'] += 1\n"
                "    if state['n'] == 24:\n"
                "        state['prof'] = profile(activities=[ProfilerActivity.CPU], "
                "record_shapes=True)\n"
                "        state['prof'].start()\n"
                "    elif state['n'] == 28:\n"
                "        state['prof'].stop()\n"
                "        handle.remove()\n"
                "handle = register_optimizer_step_post_hook(hook)\n"
                "sys.argv = sys.argv[1:]\n"
                "runpy.run_path(sys.argv[0], run_name='__main__')\n")
    (tmp / "profiler.py").write_text(profiler)
    no_report = ("import sys\nimport gobrrr.script as s\n"
                 "s._report = lambda *a, **k: None\n"
                 "from gobrrr.cli import main\nsys.argv = ['gobrrr', 'run', '-q', *sys.argv[1:]]\n"
                 "main()\n")
    (tmp / "no_report.py").write_text(no_report)
    pre = {"plain": [sys.executable], "control": [sys.executable, str(tmp / "control.py")],
           "gobrrr imports": [sys.executable, str(tmp / "imports.py")],
           "gobrrr run": [sys.executable, "-m", "gobrrr", "run", "-q"],
           "profiler only": [sys.executable, str(tmp / "profiler.py")],
           "gobrrr run, no report": [sys.executable, str(tmp / "no_report.py")]}
    rates: dict[str, list[float]] = {k: [] for k in pre}
    for r in range(a.rounds + 1):  # round 0 warms the disk cache and calibrates: dropped
        for kind, cmd in pre.items():
            out = tmp / "t.json"
            out.unlink(missing_ok=True)
            subprocess.run([*cmd, str(script), str(a.steps), str(a.time_from), str(out)],
                           check=True, env=env, capture_output=True)
            if r:
                rates[kind].append(json.loads(out.read_text())["steps_per_s"])
        if r:
            print(f"round {r}: " + ", ".join(f"{k} {v[-1]:.1f}" for k, v in rates.items())
                  + " steps/s", flush=True)
    med = {k: statistics.median(v) for k, v in rates.items()}
    result = {"steps": a.steps, "time_from": a.time_from, "rounds": a.rounds,
              "control_imports": CONTROL, "steps_per_s": rates, "median_steps_per_s": med,
              "gobrrr_imports": GOBRRR_IMPORTS,
              "slower_by": {k: 1 - med[k] / med["plain"] for k in med if k != "plain"},
              "gobrrr_run_vs_control": 1 - med["gobrrr run"] / med["control"],
              "python": sys.version.split()[0], "torch": __import__("torch").__version__,
              "cpus": len(os.sched_getaffinity(0))}
    print(f"median steps/s: plain {med['plain']:.1f}, control {med['control']:.1f} "
          f"({100 * result['slower_by']['control']:.2f}% slower), gobrrr imports "
          f"{med['gobrrr imports']:.1f} ({100 * result['slower_by']['gobrrr imports']:.2f}% "
          "slower), gobrrr run "
          f"{med['gobrrr run']:.1f} ({100 * result['slower_by']['gobrrr run']:.2f}% slower; "
          f"{100 * result['gobrrr_run_vs_control']:.2f}% slower than the control)")
    for k in ("profiler only", "gobrrr run, no report"):
        print(f"  {k}: {med[k]:.1f} ({100 * result['slower_by'][k]:.2f}% slower)")
    if a.out:
        Path(a.out).write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
