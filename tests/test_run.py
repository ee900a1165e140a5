"""`gobrrr run SCRIPT.py`: the user's own script, in place and unchanged. Each script here
is an ordinary one (argparse, a function-level main, a DataLoader, AdamW with two
parameter groups); gobrrr finds its steps from its own calls, and the script's outputs,
exit status and exceptions are its own."""

import json
import os
import subprocess
import sys
import textwrap

import pytest

from gobrrr.schema import validate
from gobrrr.script import ScriptOptions, run_script

# A step of these scripts takes a millisecond or so of the ops; every run is small.
FAST = ["--warmup", "2", "--steps", "6", "--profiled", "2"]


pytestmark = pytest.mark.usefixtures("cached_cpu_ceilings")  # tests/conftest.py

TRAIN = textwrap.dedent('''
    import argparse, time
    import torch
    from torch import nn
    from torch.utils.data import DataLoader, Dataset

    class Pairs(Dataset):
        def __init__(self, n, delay_s):
            self.n, self.delay_s = n, delay_s
        def __len__(self):
            return self.n
        def __getitem__(self, i):
            if self.delay_s:
                time.sleep(self.delay_s)  # decoding, augmentation: slow on the host
            g = torch.Generator().manual_seed(i)
            return torch.randn(32, generator=g), torch.randint(0, 4, (), generator=g)

    def main():
        p = argparse.ArgumentParser()
        p.add_argument("--out", required=True)
        p.add_argument("--delay-s", type=float, default=0.0)
        p.add_argument("--batches", type=int, default=40)
        a = p.parse_args()
        torch.set_num_threads(1)  # one thread: no OpenMP contention on a shared machine
        torch.manual_seed(0)
        model = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 4))
        opt = torch.optim.AdamW([{"params": model[0].parameters(), "weight_decay": 0.1},
                                 {"params": model[2].parameters(), "weight_decay": 0.0}],
                                lr=1e-3)
        loader = DataLoader(Pairs(8 * a.batches, a.delay_s), batch_size=8, shuffle=True)
        for x, y in loader:
            loss = nn.functional.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
        torch.save(model.state_dict(), a.out)
        print(f"final loss {loss.item():.6f}")

    if __name__ == "__main__":
        main()
''')


def write(tmp_path, name, text):
    f = tmp_path / name
    f.write_text(text)
    return f


def gobrrr_run(*args, cwd=None):
    return subprocess.run([sys.executable, "-m", "gobrrr", "run", *args], cwd=cwd,
                          capture_output=True, text=True, timeout=600,
                          env=dict(os.environ, NO_COLOR="1"))


def gobrrr_run_here(monkeypatch, *args, cwd):
    """`gobrrr run ARGS` through the same click command in this process (CliRunner): the
    command's code path without a fresh interpreter and torch import (5-8 s apiece on the
    loaded 2-core CI machine). What only a process of its own shows (its exit status,
    stdout byte for byte, the traceback on stderr, argv and sys.path as the script sees
    them) keeps the subprocess tests above and below (gobrrr_run)."""
    from click.testing import CliRunner

    from gobrrr.cli import cli

    monkeypatch.chdir(cwd)
    monkeypatch.setenv("NO_COLOR", "1")
    return CliRunner().invoke(cli, ["run", *args])


def test_a_training_script_runs_unchanged_and_its_outputs_are_byte_identical(tmp_path):
    script = write(tmp_path, "train.py", TRAIN)
    for d in ("plain", "gobrrr"):
        (tmp_path / d).mkdir()
    plain = subprocess.run([sys.executable, str(script), "--out", "plain/model.pt"],
                           cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert plain.returncode == 0, plain.stderr
    r = gobrrr_run("--json", "r.json", *FAST, str(script), "--out", "gobrrr/model.pt",
                   cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    # torch.save names its archive after the file: the same name in two folders
    assert (tmp_path / "plain/model.pt").read_bytes() == \
        (tmp_path / "gobrrr/model.pt").read_bytes()
    assert r.stdout.startswith(plain.stdout)  # the script's own output, then the report
    assert "gobrrr run" in r.stdout[len(plain.stdout):]
    d = json.loads((tmp_path / "r.json").read_text())
    validate(d, "report")
    assert d["workload"]["source"] == "script"
    assert d["workload"]["script"]["steps_from"] == "optimizer"
    assert d["steps"]["count"] == 6
    assert d["steps"]["series"]["part"] == ["warm-up"] + ["timed"] * 6 + ["profiled"] * 3
    phases = d["phases"]
    assert {"forward", "backward", "optimizer", "data loading",
            "other host time"} <= set(phases)
    # the phases split T_wall: the op phases were fitted beside the measured wait
    assert sum(p["seconds"] for p in phases.values()) == pytest.approx(
        d["budget"]["wall_s"], rel=1e-9)
    assert d["data_loading"]["host_s"] > 0
    assert len(d["data_loading"]["per_step_s"]) == 6
    assert any(n.startswith("remedies in place are predictions") for n in d["notes"])
    # the fused optimizer is written for the script's own AdamW and its two groups (the
    # prediction is from the counted optimizer ops and the cached ceilings: it exists)
    fused = next(r for r in d["remedies"] if r["spec"] == "fused_optimizer")
    assert "opt = torch.optim.AdamW([" in fused["how"]
    assert '{"params": ..., "weight_decay": 0.1},  # group 0: 2 tensors' in fused["how"]
    assert fused["how"].endswith("], fused=True)")


def test_a_dataloader_bound_loop_is_data_loading_with_the_dataloader_remedies_first(
        tmp_path, monkeypatch):
    # 8 samples x 6 ms of sleep a batch against a step of ~1 ms of ops: input-bound by
    # construction, whatever the machine's load
    import gobrrr.remedies.data as data

    monkeypatch.setattr(data, "usable_cpus", lambda: 8)  # the prediction's worker count
    script = write(tmp_path, "train.py", TRAIN)
    monkeypatch.chdir(tmp_path)
    res = run_script(str(script), ["--out", "m.pt", "--delay-s", "0.006"],
                     opts=ScriptOptions(warmup=2, steps=5, profiled=2))
    assert res.exit_code == 0 and res.error is None
    d = res.report.to_dict()
    assert d["regime"] == "overhead"
    assert d["verdict"]["cause"] == "data loading"
    assert d["phases"]["data loading"]["share"] > 0.8
    assert d["remedies"][0]["spec"] == "dataloader_workers"
    how = d["remedies"][0]["how"]
    # the user's own loader, its arguments read from the object
    assert "batch_size=8" in how and "shuffle=True" in how and "num_workers=7" in how
    assert "Pairs" in how
    assert d["remedies"][0]["predicted_speedup"] > 3


def test_a_loader_made_in_the_for_statement_still_gets_its_remedies(tmp_path, monkeypatch):
    # `for x, y in DataLoader(...)`: the loader is a temporary no name holds; its
    # arguments are read when its iterator starts (an H200 run lost them)
    import gobrrr.remedies.data as data

    monkeypatch.setattr(data, "usable_cpus", lambda: 8)
    script = write(tmp_path, "tmp_loader.py", textwrap.dedent('''
        import time, torch
        from torch.utils.data import DataLoader, Dataset
        class Slow(Dataset):
            def __len__(self):
                return 8 * 20
            def __getitem__(self, i):
                time.sleep(0.004)
                return torch.randn(16), torch.randint(0, 4, ())
        torch.set_num_threads(1)
        model = torch.nn.Linear(16, 4)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        for x, y in DataLoader(Slow(), batch_size=8, drop_last=True):
            torch.nn.functional.cross_entropy(model(x), y).backward()
            opt.step()
            opt.zero_grad()
    '''))
    res = run_script(str(script), [], opts=ScriptOptions(warmup=2, steps=5, profiled=2))
    d = res.report.to_dict()
    assert d["remedies"][0]["spec"] == "dataloader_workers"
    assert "DataLoader(dataset, batch_size=8, drop_last=True, num_workers=7" in \
        d["remedies"][0]["how"]


def test_gradient_accumulation_makes_one_step_per_optimizer_step(tmp_path, monkeypatch):
    # 1 warm-up + 3 timed + 1 + 1 profiled = 6 optimizer steps, each after 4 forwards
    body = textwrap.dedent('''
        import sys, torch
        def main(n_steps):
            model = torch.nn.Linear(8, 8)
            opt = torch.optim.SGD(model.parameters(), lr=0.1)
            for _ in range(n_steps):
                for _ in range(4):
                    model(torch.randn(4, 8)).sum().backward()
                opt.step()
                opt.zero_grad()
            print("steps", n_steps)
        main(int(sys.argv[1]))
    ''')
    script = write(tmp_path, "accum.py", body)
    opts = ["--warmup", "1", "--steps", "3", "--profiled", "1", "--json", "r.json"]
    r = gobrrr_run_here(monkeypatch, *opts, str(script), "6", cwd=tmp_path)
    assert r.exit_code == 0, r.output
    d = json.loads((tmp_path / "r.json").read_text())
    assert d["workload"]["script"]["steps_from"] == "optimizer"
    assert d["steps"]["count"] == 3
    short = gobrrr_run_here(monkeypatch, *opts, str(script), "5", cwd=tmp_path)  # 1 short
    assert short.exit_code == 0  # the script's own status
    assert "steps 5" in short.stdout
    assert "gobrrr run: the script ended after 5 step(s)" in short.stderr
    assert "needs 6" in short.stderr


def test_an_inference_loop_steps_on_its_outermost_forward(tmp_path, monkeypatch):
    body = textwrap.dedent('''
        import torch
        model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.GELU(),
                                    torch.nn.Linear(32, 4)).eval()
        with torch.no_grad():
            for _ in range(30):
                model(torch.randn(8, 16))
    ''')
    script = write(tmp_path, "infer.py", body)
    r = gobrrr_run_here(monkeypatch, "--json", "r.json", *FAST, str(script), cwd=tmp_path)
    assert r.exit_code == 0, r.output
    d = json.loads((tmp_path / "r.json").read_text())
    assert d["workload"]["script"]["steps_from"] == "forward"
    assert "forward" in d["phases"] and "backward" not in d["phases"]
    assert "data_loading" not in d  # no DataLoader: no wait measured, none invented


def test_gobrrr_step_marks_steps_by_hand_and_does_nothing_without_gobrrr(tmp_path,
                                                                         monkeypatch):
    body = textwrap.dedent('''
        import torch, gobrrr
        model = torch.nn.Linear(8, 8)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        for i in range(40):
            model(torch.randn(4, 8)).sum().backward()
            if i % 2:
                opt.step()
                opt.zero_grad()
            gobrrr.step()
        print("ok")
    ''')
    script = write(tmp_path, "manual.py", body)
    plain = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                           timeout=300)
    assert plain.returncode == 0 and plain.stdout == "ok\n", plain.stderr
    r = gobrrr_run_here(monkeypatch, "--json", "r.json", *FAST, str(script), cwd=tmp_path)
    assert r.exit_code == 0, r.output
    d = json.loads((tmp_path / "r.json").read_text())
    assert d["workload"]["script"]["steps_from"] == "manual"


def test_the_script_sees_its_own_argv_path_and_name(tmp_path):
    sub = tmp_path / "proj"
    sub.mkdir()
    write(sub, "helper.py", "VALUE = 7\n")
    body = textwrap.dedent('''
        import sys
        from pathlib import Path
        import helper  # importable from the script's folder: sys.path[0]
        assert __name__ == "__main__"
        assert sys.argv[1:] == ["--x", "1", "--steps", "2"], sys.argv
        assert Path(sys.argv[0]).name == "s.py" and Path(__file__).name == "s.py"
        assert sys.path[0] == str(Path(__file__).resolve().parent)
        print("argv ok", helper.VALUE)
    ''')
    script = write(sub, "s.py", body)
    r = gobrrr_run(str(script), "--x", "1", "--steps", "2", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("argv ok 7\n")


def test_dash_m_runs_a_module_as_python_does(tmp_path):
    # a process of its own: `python -m gobrrr` puts the working folder on sys.path, where
    # -m finds the module (this process's sys.path does not hold tmp_path)
    write(tmp_path, "mymod.py", "import sys\nprint('module', sys.argv[1:])\n")
    r = gobrrr_run("-m", "mymod", "a", "--b", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("module ['a', '--b']\n")
    assert "gobrrr run: the script ended after 0 step(s)" in r.stderr


def test_exit_status_and_exceptions_are_the_scripts_own(tmp_path, gobrrr_frames):
    exits = write(tmp_path, "exits.py", "import sys\nprint('bye')\nsys.exit(3)\n")
    r = gobrrr_run(str(exits), cwd=tmp_path)
    assert r.returncode == 3 and r.stdout.startswith("bye\n")
    raises = write(tmp_path, "raises.py", textwrap.dedent('''
        def inner():
            raise ValueError("boom in the script")
        inner()
    '''))
    r = gobrrr_run(str(raises), cwd=tmp_path)
    assert r.returncode == 1
    assert "ValueError: boom in the script" in r.stderr
    tb = r.stderr[r.stderr.index("Traceback"):]
    first = [line for line in tb.splitlines() if line.lstrip().startswith("File ")][0]
    assert "raises.py" in first  # the script's own frames, from its first
    assert gobrrr_frames(tb) == []


def test_bad_input_is_one_line(tmp_path, monkeypatch):
    r = gobrrr_run(str(tmp_path / "nope.py"), cwd=tmp_path)  # a process's exit status
    assert r.returncode == 2
    assert r.stderr.strip().splitlines()[-1].endswith(f"no such script: {tmp_path}/nope.py")
    r = gobrrr_run_here(monkeypatch, cwd=tmp_path)
    assert r.exit_code == 2 and "give a script" in r.stderr
    r = gobrrr_run_here(monkeypatch, "-m", "no_such_module_here", cwd=tmp_path)
    assert r.exit_code == 2 and "no module named 'no_such_module_here'" in r.stderr


def test_exit_after_stops_the_script_once_the_report_is_written(tmp_path, monkeypatch):
    script = write(tmp_path, "train.py", TRAIN)
    r = gobrrr_run_here(monkeypatch, "--exit-after", "--json", "r.json", *FAST, str(script),
                        "--out", "m.pt", cwd=tmp_path)
    assert r.exit_code == 0, r.output
    assert (tmp_path / "r.json").is_file()
    assert not (tmp_path / "m.pt").exists()  # stopped before the script saved
    assert "final loss" not in r.stdout


def test_hooks_come_off_and_the_process_is_as_before(tmp_path, monkeypatch):
    import torch.nn.modules.module as nn_module
    from torch.optim import optimizer as optim_module
    from torch.utils.data import dataloader

    before = (dict(nn_module._global_forward_hooks),
              dict(nn_module._global_forward_pre_hooks),
              dict(optim_module._global_optimizer_post_hooks),
              dataloader._BaseDataLoaderIter.__next__,
              dataloader._BaseDataLoaderIter.__init__)
    argv, path = list(sys.argv), list(sys.path)
    script = write(tmp_path, "train.py", TRAIN)
    monkeypatch.chdir(tmp_path)
    res = run_script(str(script), ["--out", "m.pt", "--batches", "12"],
                     opts=ScriptOptions(warmup=1, steps=3, profiled=1))
    assert res.report is not None and res.exit_code == 0
    after = (dict(nn_module._global_forward_hooks),
             dict(nn_module._global_forward_pre_hooks),
             dict(optim_module._global_optimizer_post_hooks),
             dataloader._BaseDataLoaderIter.__next__,
             dataloader._BaseDataLoaderIter.__init__)
    assert after == before
    assert sys.argv == argv and sys.path == path



# The process as the script sees it: what gobrrr could leave on its hot path after the
# window (hooks, patched methods, a tracer, a thread, a proxy on stdout).
PROCESS_STATE = textwrap.dedent('''
    def process_state():
        import sys, threading
        import torch.nn.modules.module as nn_module
        from torch.amp import grad_scaler
        from torch.optim import optimizer as optim_module
        from torch.utils.data import dataloader

        hooks = {n: len(getattr(m, n)) for m in (nn_module, optim_module) for n in dir(m)
                 if n.startswith("_global_") and isinstance(getattr(m, n), dict)}
        return {"hooks": hooks,
                "patched": [f.__qualname__ for f in (
                    dataloader._BaseDataLoaderIter.__next__,
                    dataloader._BaseDataLoaderIter.__init__, grad_scaler.GradScaler.step)],
                "tracer": [repr(sys.getprofile()), repr(sys.gettrace())],
                "threads": sorted(t.name for t in threading.enumerate()),
                "stdout_is_its_own": sys.stdout is sys.__stdout__,
                "stderr_is_its_own": sys.stderr is sys.__stderr__}
''')


def test_after_the_window_nothing_of_gobrrr_is_left_in_the_scripts_process(tmp_path):
    """On a terminal, progress shown: each step after the window runs in the process the
    script has without gobrrr (hooks, patched methods, tracer, threads, stdout). gobrrr
    run's live spinner once left rich's refresh thread (10 redraws a second) and a proxy
    on sys.stdout and sys.stderr there until the script ended."""
    import pty

    body = PROCESS_STATE + textwrap.dedent('''
        import json, sys, torch
        model = torch.nn.Linear(8, 8)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        for i in range(12):  # the window: 1 warm-up + 3 timed + 1 + 1 profiled = 6 steps
            model(torch.randn(4, 8)).sum().backward()
            opt.step()
            opt.zero_grad()
        json.dump(process_state(), open(sys.argv[1], "w"))
    ''')
    script = write(tmp_path, "state.py", body)
    plain = subprocess.run([sys.executable, str(script), "plain.json"], cwd=tmp_path,
                           capture_output=True, text=True, timeout=300)
    assert plain.returncode == 0, plain.stderr
    main, terminal = pty.openpty()  # stderr a terminal: gobrrr's progress is shown there
    try:
        proc = subprocess.Popen(
            [sys.executable, "-m", "gobrrr", "run", "--warmup", "1", "--steps", "3",
             "--profiled", "1", "--json", "r.json", str(script), "state.json"],
            cwd=tmp_path, stdout=subprocess.PIPE, stderr=terminal, text=True,
            env=dict(os.environ, NO_COLOR="1"))
        os.close(terminal)
        said = []
        while True:  # read the terminal as it fills, or the process blocks on it
            try:
                chunk = os.read(main, 4096)
            except OSError:  # EIO: every copy of the terminal's other end closed
                break
            if not chunk:
                break
            said.append(chunk.decode(errors="replace"))
        out, _ = proc.communicate(timeout=600)
    finally:
        os.close(main)
    assert proc.returncode == 0, "".join(said)
    assert "gobrrr: profiling 1 steps" in "".join(said)  # progress was on
    assert (tmp_path / "r.json").is_file()  # the window closed before the 12th step
    after = json.loads((tmp_path / "state.json").read_text())
    assert after == json.loads((tmp_path / "plain.json").read_text())
    assert after["threads"] == ["MainThread"]
    assert after["stdout_is_its_own"] is True
    assert set(after["hooks"].values()) == {0}


# The modules that make the report (script_report.py and what it loads): `gobrrr run`
# makes it in a child process, so the script's steps after the window run in a process
# that never loaded them (docs/run.md, "The cost after the window").
ANALYSIS = ("gobrrr.script_report", "gobrrr.diagnosis", "gobrrr.report", "gobrrr.budget",
            "gobrrr.verdict", "gobrrr.experiments", "gobrrr.counting",
            "gobrrr.tracefile.analysis", "gobrrr.dist.analyze", "gobrrr.show.terminal",
            "gobrrr.show.files", "gobrrr.show.report_html", "jinja2")


def test_the_report_is_made_in_a_child_the_scripts_process_never_loads_the_analysis(
        tmp_path):
    body = textwrap.dedent('''
        import json, sys, torch
        model = torch.nn.Linear(8, 8)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        for i in range(12):  # the window: 1 warm-up + 3 timed + 1 + 1 profiled = 6 steps
            model(torch.randn(4, 8)).sum().backward()
            opt.step()
            opt.zero_grad()
        json.dump(sorted(sys.modules), open(sys.argv[1], "w"))
        print("script done")
    ''')
    script = write(tmp_path, "mods.py", body)
    tmp = tmp_path / "tmp"  # the trace and the child's job and output go here, and go
    tmp.mkdir()
    r = subprocess.run([sys.executable, "-m", "gobrrr", "run", "--warmup", "1", "--steps",
                        "3", "--profiled", "1", "--json", "r.json", str(script),
                        "modules.json"], cwd=tmp_path, capture_output=True, text=True,
                       timeout=600, env=dict(os.environ, NO_COLOR="1", TMPDIR=str(tmp)))
    assert r.returncode == 0, r.stderr
    loaded = json.loads((tmp_path / "modules.json").read_text())
    assert "gobrrr.script" in loaded  # the window was there
    assert [m for m in loaded if m in ANALYSIS or m.startswith("gobrrr.tracefile")] == []
    # the child's report: its file, and on stdout after the script's own output
    assert r.stdout.startswith("script done\n") and "gobrrr run" in r.stdout
    d = json.loads((tmp_path / "r.json").read_text())
    validate(d, "report")
    assert d["workload"]["script"]["timed"] == 3
    assert "gobrrr: wrote r.json" in r.stderr  # the child's progress, on the same stderr
    assert [f.name for f in tmp.iterdir() if f.name.startswith("gobrrr")] == []


# Loaded by every Python process started with its folder on PYTHONPATH (site imports
# `sitecustomize`): it breaks the report's child process only, as $BREAK says.
BREAK_CHILD = textwrap.dedent('''
    import os, sys
    if "gobrrr.cli.run_report" in sys.orig_argv:
        if os.environ["BREAK"] == "raise":
            import gobrrr.script_report as sr
            def report_of(window, say):
                raise RuntimeError("boom in the report")
            sr.report_of = report_of
        else:
            os.kill(os.getpid(), 9)
''')


def test_a_report_process_that_fails_is_one_line_and_a_non_zero_exit(tmp_path):
    script = write(tmp_path, "train.py", TRAIN)
    site = tmp_path / "site"
    site.mkdir()
    write(site, "sitecustomize.py", BREAK_CHILD)
    for how, said in (("raise", "gobrrr could not make the report: RuntimeError: boom in "
                                "the report"),
                      ("kill", "ended with signal 9, saying nothing")):
        env = dict(os.environ, NO_COLOR="1", BREAK=how, PYTHONPATH=str(site))
        r = subprocess.run([sys.executable, "-m", "gobrrr", "run", "--json", "r.json",
                            *FAST, str(script), "--out", "m.pt"], cwd=tmp_path,
                           capture_output=True, text=True, timeout=600, env=env)
        assert r.returncode == 1, (how, r.stderr)  # the script itself exited 0
        assert "final loss" in r.stdout and "gobrrr run" not in r.stdout  # no report
        last = r.stderr.strip().splitlines()[-1]
        assert last.startswith("gobrrr run: ") and last.endswith(said), (how, r.stderr)
        assert not (tmp_path / "r.json").exists()


def test_an_optimizer_travels_to_the_report_as_the_remedies_read_it():
    # the child rebuilds each optimizer from OptimizerFacts (no tensors): the snippet it
    # writes is the one the live optimizer gives, a scheduler's initial_lr and a tensor
    # lr included, for torch's own class and for one of the script's own
    import pickle

    import torch

    from gobrrr.remedies.optim import optimizer_snippet
    from gobrrr.script_window import optimizer_facts

    class Mine(torch.optim.SGD):
        def __init__(self, params, lr=0.1, nesterov_like=3):
            super().__init__(params, lr=lr, momentum=0.9)

    m = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Linear(8, 2))
    adamw = torch.optim.AdamW([{"params": m[0].parameters(), "weight_decay": 0.1},
                               {"params": m[1].parameters(), "lr": torch.tensor(0.01)}],
                              lr=3e-4, betas=(0.8, 0.99))
    torch.optim.lr_scheduler.LambdaLR(adamw, lambda s: 0.5)  # lr 1.5e-4, initial 3e-4
    mine = Mine(m.parameters(), lr=0.2)
    for opt, flag in ((adamw, "fused"), (mine, "foreach")):
        back = pickle.loads(pickle.dumps(optimizer_facts(opt))).rebuilt()
        assert type(back).__name__ == type(opt).__name__
        assert optimizer_snippet(back, flag) == optimizer_snippet(opt, flag)
        assert [p.numel() * p.element_size() for g in back.param_groups
                for p in g["params"]] == [p.numel() * p.element_size()
                                          for g in opt.param_groups for p in g["params"]]
    assert type(pickle.loads(pickle.dumps(optimizer_facts(adamw))).rebuilt()) is \
        torch.optim.AdamW


@pytest.mark.cuda
def test_a_cuda_script_reads_the_wait_for_data_against_the_gpu(tmp_path, monkeypatch):
    import gobrrr.remedies.data as data

    monkeypatch.setattr(data, "usable_cpus", lambda: 8)
    body = textwrap.dedent('''
        import time, torch
        from torch.utils.data import DataLoader, Dataset
        class Slow(Dataset):
            def __len__(self):
                return 8 * 30
            def __getitem__(self, i):
                time.sleep(0.004)
                return torch.randn(256), torch.randint(0, 8, ())
        model = torch.nn.Sequential(torch.nn.Linear(256, 1024), torch.nn.ReLU(),
                                    torch.nn.Linear(1024, 8)).cuda()
        opt = torch.optim.AdamW(model.parameters())
        for x, y in DataLoader(Slow(), batch_size=8):
            x, y = x.cuda(), y.cuda()
            torch.nn.functional.cross_entropy(model(x), y).backward()
            opt.step()
            opt.zero_grad()
    ''')
    script = write(tmp_path, "cuda_train.py", body)
    monkeypatch.chdir(tmp_path)
    res = run_script(str(script), [], opts=ScriptOptions(warmup=2, steps=6, profiled=2))
    assert res.exit_code == 0 and res.error is None, res.why
    d = res.report.to_dict()
    validate(d, "report")
    assert d["workload"]["device"] == "cuda"
    dl = d["data_loading"]
    assert 0 <= dl["device_busy_share"] <= 1 and "GPU idle" in dl["source"]
    assert d["verdict"]["cause"] == "data loading"
    seen = (d["budget"]["wall_s"], d["budget"]["data_loading_s"], dl,
            [(r["spec"], r["predicted_speedup"], r["basis"]) for r in d["remedies"]])
    assert d["remedies"][0]["spec"] == "dataloader_workers", seen
    # the batches came from pageable memory: the pinned-memory remedy is offered
    copies = sorted({k["name"] for k in d["budget"]["kernels"] if "emcpy" in k["name"]})
    assert "dataloader_pin_memory" in [r["spec"] for r in d["remedies"]], copies


DDP_SCRIPT = textwrap.dedent('''
    import gc, sys, torch, torch.distributed as dist
    from torch import nn
    from torch.nn.parallel import DistributedDataParallel as DDP
    dist.init_process_group("gloo")
    torch.manual_seed(0)
    torch.set_num_threads(1)
    # 4 MB of gradients against a small forward: the all-reduce is most of the step
    model = DDP(nn.Sequential(nn.Linear(512, 1024), nn.ReLU(), nn.Linear(1024, 512)))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x = torch.randn(8, 512)
    for step in range(int(sys.argv[1])):
        model(x).square().mean().backward()
        opt.step()
        opt.zero_grad()
    print(f"rank {dist.get_rank()} done")
    # DDP's reducer, left in a reference cycle, outlived the process group and aborted
    # its rank at exit ("terminate called without an active exception") in 5 of 20 runs
    # of this script under torchrun without gobrrr (torch 2.13, CPU, gloo); 0 of 40 so
    del model, opt
    gc.collect()
    dist.destroy_process_group()
''')


@pytest.mark.slow
def test_under_torchrun_every_rank_runs_in_place_and_rank_0_merges(tmp_path):
    # torchrun -m gobrrr run: each rank's window closes at the same optimizer step; rank 0
    # reads both ranks' traces as analyze reads a job's and reports with communication
    script = write(tmp_path, "ddp.py", DDP_SCRIPT)
    env = dict(os.environ, NO_COLOR="1", OMP_NUM_THREADS="1")
    p = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone",
                        "--nproc-per-node", "2", "-m", "gobrrr", "run", "--json", "r.json",
                        "--warmup", "1", "--steps", "4", "--profiled", "2", str(script),
                        "12"], cwd=tmp_path, env=env, capture_output=True, text=True,
                       timeout=300)
    assert p.returncode == 0, p.stderr[-3000:]
    assert "rank 0 done" in p.stdout and "rank 1 done" in p.stdout
    assert p.stdout.count("gobrrr run") == 1  # one report: rank 0's
    assert "gobrrr run: " not in p.stderr  # rank 1 says nothing about a missing report
    d = json.loads((tmp_path / "r.json").read_text())
    validate(d, "report")
    assert d["workload"]["script"]["steps_from"] == "optimizer"
    assert d["workload"]["script"]["timed"] == 4
    dist = d["distributed"]
    assert dist["world_size"] == 2 and len(dist["ranks"]) == 2
    assert d["budget"]["parts_s"]["communication"] > 0
    # the step's phases hold the exposed communication and still sum to T_wall
    assert d["phases"]["communication"]["seconds"] == pytest.approx(
        d["budget"]["parts_s"]["communication"], rel=1e-9)
    assert sum(p["seconds"] for p in d["phases"].values()) == pytest.approx(
        d["budget"]["wall_s"], rel=1e-9)
    assert any(n.startswith("torchrun: every rank ran the script in place") for n in
               d["notes"] + dist.get("notes", []))
    # the DDP remedies come from the same facts doctor gives them
    assert any(r["spec"] == "gradient_as_bucket_view" for r in d["remedies"]), \
        [r["spec"] for r in d["remedies"]]


def test_a_step_gradscaler_skipped_still_ends_a_step(tmp_path):
    # AMP's GradScaler skips optimizer.step() on inf gradients (iteration 3 here): the
    # script still made 7 steps, and the window (1 + 4 + 1 + 1) closes on the 7th
    script = write(tmp_path, "amp.py", textwrap.dedent('''
        import torch
        torch.set_num_threads(1)
        model = torch.nn.Linear(16, 16)
        opt = torch.optim.SGD(model.parameters(), lr=0.01)
        scaler = torch.amp.GradScaler("cpu")
        for i in range(7):
            loss = model(torch.randn(4, 16)).square().mean()
            if i == 2:
                loss = loss * float("inf")
            scaler.scale(loss).backward()
            scaler.step(opt)
            scaler.update()
            opt.zero_grad()
    '''))
    res = run_script(str(script), [], opts=ScriptOptions(warmup=1, steps=4, profiled=1))
    assert res.exit_code == 0 and res.report is not None, res.why
    d = res.report.to_dict()
    assert d["steps"]["count"] == 4
    assert any(n.startswith("1 step(s) in the window skipped their optimizer step")
               for n in d["notes"])
