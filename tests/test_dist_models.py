"""The distributed doctor and optimize on a real program: GPT-2 (transformers, a tiny
config on CPU) in a training script's shape, a Trainer holding DDP, AdamW and a LambdaLR
scheduler (benchmarks/dist_targets.py), with 2 gloo ranks under torchrun on this CPU
(OMP_NUM_THREADS=1 each). gobrrr must find the DDP inside the trainer (bound `self`), and
leave the trainer's model, optimizer and scheduler as it found them on every rank."""

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from gobrrr.schema import validate

pytest.importorskip("transformers")

ROOT = Path(__file__).resolve().parents[1]
TARGET = f"{ROOT / 'benchmarks' / 'dist_targets.py'}:gpt2_ddp"
TIMEOUT_S = 20  # GOBRRR_DIST_TIMEOUT_S: every failure ends within it


@pytest.fixture(scope="module")
def dist_env(tmp_path_factory, one_thread_cache):
    """One calibration cache for the module's runs (conftest's one_thread_cache)."""
    env = dict(os.environ, OMP_NUM_THREADS="1", GOBRRR_DIST_TIMEOUT_S=str(TIMEOUT_S),
               XDG_CACHE_HOME=str(one_thread_cache), NO_COLOR="1",
               TRANSFORMERS_VERBOSITY="error")
    return env


def _torchrun(env, *args, timeout=240):
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone",
           "--nproc-per-node", "2", *args]
    return subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)


@pytest.mark.slow
def test_doctor_finds_the_ddp_inside_the_trainer(dist_env):
    p = _torchrun(dist_env, "-m", "gobrrr", "doctor", TARGET, "--device", "cpu", "--json",
                  "--time-budget", "0.3")
    assert p.returncode == 0, p.stderr[-3000:]
    d = json.loads(p.stdout)
    validate(d)
    assert set(d["fractions"]) == {"overhead", "memory", "compute", "communication"}
    assert sum(d["fractions"].values()) == pytest.approx(1.0)
    dd = d["distributed"]
    assert dd["world_size"] == 2 and [r["rank"] for r in dd["ranks"]] == [0, 1]
    for r in dd["ranks"]:
        assert sum(r["fractions"].values()) == pytest.approx(1.0)
        # the no_sync experiment ran: the DDP was found through trainer.train_step's self
        ns = r["no_sync"]
        assert ns["skipped"] is None, ns
        assert ns["sync_s"] > 0 and ns["no_sync_s"] > 0 and ns["bound_s"] is not None
    # DDP all-reduces the gradients in buckets: 0.4 M fp32 parameters, ~1.7 MB
    assert dd["collectives"]
    assert {c["collective"] for c in dd["collectives"]} >= {"all_reduce"}
    assert not [n for n in d["notes"] if "could not be restored" in n or "differs" in n]


# Runs the diagnosis through gobrrr's Python entry point on each rank, with the trainer
# trained 3 steps first (AdamW's moments and step, the scheduler's counters all non-zero),
# and writes what changed to OUT/rank{r}.json.
_STATE_CHECK = """
import json, os, sys
import torch
from gobrrr.dist.diagnose import DistOptions, diagnose_distributed
from gobrrr.dist.lockstep import World
from gobrrr.targets import load_target

target, out = sys.argv[1], sys.argv[2]
world = World.from_env()
seen = {}

def state(t):
    opt = t.optimizer
    return {
        "step": t.step,
        "sched": {k: v for k, v in t.scheduler.state_dict().items() if k != "lr_lambdas"},
        "lr": [g["lr"] for g in opt.param_groups],
        "opt_state": {i: {k: v.clone() for k, v in s.items()}
                      for i, s in enumerate(opt.state.values())},
        "params": [p.detach().clone() for p in t.model.parameters()],
        "grads": [None if p.grad is None else p.grad.clone() for p in t.model.parameters()],
        "batch": seen["w"].args[0].clone(),
    }


def same_objects(t):
    return (t.model, t.optimizer, t.scheduler, t.optimizer.__dict__.get("step"))

def load():
    w = load_target(target, "cpu")
    for _ in range(3):
        w.run("training before gobrrr")
    seen["w"] = w
    seen["before"] = state(w.fn.__self__)
    seen["objects"] = same_objects(w.fn.__self__)
    return w

diagnose_distributed(world, target, "cpu", load, DistOptions(time_budget_s=0.2))
t = seen["w"].fn.__self__
before, after = seen["before"], state(t)

def same(a, b):
    if isinstance(a, torch.Tensor):
        return isinstance(b, torch.Tensor) and torch.equal(a, b)
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    return a == b

diff = {}
if any(a is not b for a, b in zip(seen["objects"], same_objects(t))):
    diff["objects"] = "the trainer's model, optimizer, scheduler or step wrapper replaced"
for k in before:
    if not same(before[k], after[k]):
        diff[k] = repr(after[k])[:200]
summary = {"diff": diff, "step": before["step"], "last_epoch": before["sched"]["last_epoch"],
           "opt_entries": len(before["opt_state"]),
           "adam_step": float(next(iter(before["opt_state"].values()))["step"]),
           "grads_none": sum(g is None for g in before["grads"])}
with open(os.path.join(out, f"rank{world.rank}.json"), "w") as f:
    json.dump(summary, f)
"""


@pytest.mark.slow
def test_trainer_state_is_the_same_after_the_diagnosis_on_every_rank(dist_env, tmp_path):
    script = tmp_path / "check.py"
    script.write_text(_STATE_CHECK)
    p = _torchrun(dist_env, str(script), TARGET, str(tmp_path))
    assert p.returncode == 0, p.stderr[-3000:]
    for rank in (0, 1):
        got = json.loads((tmp_path / f"rank{rank}.json").read_text())
        # what was checked is not trivial: 3 steps of training before gobrrr ran
        assert (got["step"], got["last_epoch"], got["adam_step"]) == (3, 3, 3.0), got
        assert got["opt_entries"] > 0 and got["grads_none"] == 0, got
        # scheduler counters and LR, AdamW's moments and step, parameters, gradients, the
        # batch, the trainer's counter: all as before gobrrr's many calls
        assert got["diff"] == {}, (rank, got["diff"])


@pytest.mark.serial
@pytest.mark.slow
def test_optimize_rewraps_the_ddp_inside_the_trainer(dist_env):
    t0 = time.perf_counter()
    p = subprocess.run([sys.executable, "-m", "gobrrr", "optimize", "--nproc-per-node", "2",
                        TARGET, "--device", "cpu", "--json", "--budget-s", "40"],
                       env=dist_env, capture_output=True, text=True, timeout=240)
    took = time.perf_counter() - t0
    assert p.returncode == 0, p.stderr[-3000:]
    d = json.loads(p.stdout)
    assert d["schema"] == "gobrrr.optimize"
    dist = d["distributed"]
    assert dist["world_size"] == 2 and dist["kind"] == "ddp"
    facts = dist["facts"]
    assert facts is not None and facts["grad_bytes"] > 0
    for r in d["remedies"]:
        assert r["snippet"] and r["reason"], r
        assert r["status"] != "failed", (r["name"], r["reason"])
    rows = {r["name"]: r for r in d["remedies"]}
    assert rows["larger_batch"]["status"] == "advice"
    ran = [r for r in d["remedies"] if r["status"] not in ("skipped", "advice")]
    # re-wrapped copies of trainer.model ran and were checked on both ranks; how many fit
    # the budget depends on the load of the 2 cores
    assert len(ran) >= 2, [(r["name"], r["status"], r["reason"]) for r in d["remedies"]]
    for r in ran:
        ver = r["checks"]["verification"]
        assert set(ver) == {"rank0", "rank1"}, r["name"]
        if r["name"] == "bf16_compress_hook":
            continue  # bf16 rounds the gradients: judged at bf16's tolerance, may fail
        # the others keep the numerics: verified on both ranks at fp32's tolerance, the
        # candidate at the reference's LR-schedule step (its warm calls undone, the
        # scheduler and the param_groups' lr too; before: every remedy rejected here)
        assert r["status"] != "rejected", (r["name"], r["reason"])
        for rank in ver.values():
            assert all(c["ok"] for c in rank.values()), (r["name"], rank)
    assert took < 200, took
