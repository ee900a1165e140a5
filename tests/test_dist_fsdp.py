"""FSDP2 (fully_shard) under torchrun with 2 gloo ranks on this CPU (OMP_NUM_THREADS=1
each: the CI machine has 2 cores): the no-communication experiment (parameters kept
unsharded) and its restoring of the workload, the all-gather and reduce-scatter
collectives, the two regimes, and the FSDP2 remedies of optimize."""

import json
import os
import subprocess
import sys
import textwrap

import pytest

from gobrrr.schema import validate

TIMEOUT_S = 20  # GOBRRR_DIST_TIMEOUT_S in these runs: every failure ends within it


@pytest.fixture(scope="module")
def dist_env(tmp_path_factory, one_thread_cache):
    """One calibration cache for the module's runs (conftest's one_thread_cache)."""
    env = dict(os.environ, OMP_NUM_THREADS="1", GOBRRR_DIST_TIMEOUT_S=str(TIMEOUT_S),
               XDG_CACHE_HOME=str(one_thread_cache), NO_COLOR="1")
    return env


def _doctor(env, *args, timeout=180):
    cmd = [sys.executable, "-m", "gobrrr", "doctor", "--nproc-per-node", "2", *args,
           "--device", "cpu", "--json", "--time-budget", "0.3"]
    p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)
    assert p.returncode == 0, p.stderr[-3000:]
    d = json.loads(p.stdout)
    validate(d)
    return d


@pytest.mark.serial
@pytest.mark.slow
def test_fsdp_comm_is_communication_bound_with_the_unsharded_bound(dist_env):
    # fsdp_comm: 8 units of 512^2 + 512 fp32 (1 MB each), batch 4: per step each unit is
    # all-gathered twice (forward, backward) and its gradient reduce-scattered, for
    # ~1 ms of math (dist/examples.py).
    d = _doctor(dist_env, "examples:fsdp_comm")
    assert set(d["fractions"]) == {"overhead", "memory", "compute", "communication"}
    assert sum(d["fractions"].values()) == pytest.approx(1.0)
    assert d["regime"] == "communication", d["fractions"]
    dd = d["distributed"]
    for r in dd["ranks"]:
        assert r["fractions"]["communication"] > r["fractions"]["compute"], r["fractions"]
        ns = r["no_sync"]
        assert ns["method"] == "FSDP2 parameters kept unsharded", ns
        # removing every collective saves a large share of the step (measured ~0.8)
        assert ns["bound_fraction"] > 0.25, ns
        assert r["no_sync_comparison"] is not None
    assert "FSDP2" in dd["no_sync_gap"]
    by = {c["collective"]: c for c in dd["collectives"]}
    assert set(by) == {"all_gather", "reduce_scatter"}, dd["collectives"]
    # nccl-tests' size is the whole tensor: 512*512 + 512 = 262656 floats = 1050624 B
    # (gloo names the all-gather's range by its shard, and runs the reduce-scatter as an
    # all-reduce of the whole input: comm.py names both by the c10d op that issued them)
    assert by["all_gather"]["bytes"] == by["reduce_scatter"]["bytes"] == 262656 * 4
    # per step: 8 units x 2 all-gathers (forward, backward), 8 reduce-scatters
    assert by["all_gather"]["calls_per_step"] == 16
    assert by["reduce_scatter"]["calls_per_step"] == 8
    assert all(c["busbw_gbps"] > 0 for c in dd["collectives"])
    # projected with the FSDP model: 8 units, gathered twice, FSDP2's host work kept
    # beside the unsharded step (issue 27: DDP's model on the unsharded step missed
    # the two-H200 step by -72%)
    check, inputs = dd["projection_check"], dd["projection"]["inputs"]
    assert check["strategy"] == "fsdp", check
    assert (inputs["fsdp_units"], inputs["fsdp_gathers_per_unit"]) == (8, 2.0)
    assert inputs["fsdp_host_s"] >= 0.0


@pytest.mark.serial
@pytest.mark.slow
def test_fsdp_compute_is_compute_bound(dist_env):
    # ~6 GFLOP per step against 2 x 256^2 parameters: the collectives hide behind math.
    # Compute above communication, no wider margin: two ranks and gloo's threads share
    # the CI machine's 2 cores, and a rank descheduled mid-step makes its peer wait in a
    # collective (the DDP twin was seen at 0.56 vs 0.29 on a loaded machine).
    # The regime must be compute in two diagnoses of three: the CPU's overhead share (the
    # wall loop minus the replayed ops) swings on this VM; eight runs read overhead 0.00
    # to 0.44 and compute 0.35 to 0.80, the same before and after this session's changes.
    # Each rank's compute above its communication is part of the same two-of-three vote:
    # checked alone inside the loop it failed a group run once (a descheduled rank).
    seen = []
    for _ in range(3):
        d = _doctor(dist_env, "examples:fsdp_compute", "--no-experiments")
        ranks = [r["fractions"] for r in d["distributed"]["ranks"]]
        seen.append((d["fractions"], ranks))
        wins = sum(f["compute"] == max(f.values())
                   and all(r["compute"] > r["communication"] for r in rs)
                   for f, rs in seen)
        if wins == 2 or len(seen) - wins == 2:
            break
    assert wins == 2, seen


def _rank_results(env, out, source):
    """Run `source` under torchrun on 2 gloo ranks, its argv[1] = `out`; each rank's
    rank{N}.json (one file per rank: two ranks' prints on one pipe once ran into one
    line in CI)."""
    script = out / "script.py"
    script.write_text(source)
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone",
           "--nproc-per-node", "2", str(script), str(out)]
    p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr[-3000:]
    return [json.loads((out / f"rank{r}.json").read_text()) for r in (0, 1)]


_RESTORED = textwrap.dedent("""
    import json, os, sys, torch, torch.distributed as dist
    from torch.distributed.tensor import DTensor
    from gobrrr.dist import experiments as dx
    from gobrrr.dist.examples import fsdp_comm
    from gobrrr.dist.lockstep import Lockstep, World, setup

    world = World.from_env()
    ctrl, _ = setup(world, "cpu", 20.0)
    ls = Lockstep(world, ctrl, 20.0)
    step, args = fsdp_comm()

    class W:
        fn, kwargs, device = step, {}, "cpu"

        def __init__(self):
            self.args = args

        def run(self, _what):
            return step(*args)

    w = W()
    w.run("")
    units = dx.find_fsdp_units(w)
    model = units[-1] if not units[0]._get_fsdp_state()._is_root else units[0]
    before = [{k: repr(v) for k, v in s.items()} for s in dx.fsdp_settings(units)]
    ns = dx.no_sync_times(w, ls, 0.2)
    after = [{k: repr(v) for k, v in s.items()} for s in dx.fsdp_settings(units)]
    sharded = all(isinstance(p, DTensor) for p in model.parameters())
    left = sum(fp.unsharded_accumulated_grad is not None or (
                   hasattr(fp, "_unsharded_param") and fp._unsharded_param.grad is not None)
               for u in units if u._get_fsdp_state()._fsdp_param_group
               for fp in u._get_fsdp_state()._fsdp_param_group.fsdp_params)
    w.run("")  # a normal step: the reduce-scatter gives every shard its gradient
    grads = all(p.grad is not None for p in model.parameters())
    with open(os.path.join(sys.argv[1], f"rank{world.rank}.json"), "w") as f:
        json.dump({"rank": world.rank, "same": before == after, "n": len(units),
                   "sharded": sharded, "left": left, "grads": grads,
                   "method": ns.method, "bound": ns.bound_s}, f)
    dist.destroy_process_group()
    os._exit(0)  # as _SHARDS: no interpreter teardown once the results are written
""")


@pytest.mark.slow
def test_fsdp_settings_restored_after_the_experiment(dist_env, tmp_path):
    rows = _rank_results(dist_env, tmp_path, _RESTORED)
    assert [r["rank"] for r in rows] == [0, 1]
    for r in rows:
        # 8 Linear units and the root; every setting as before, the parameters back to
        # their shards, no unsharded gradient left to leak into the next reduce-scatter
        assert r["n"] == 9 and r["method"] == "FSDP2 parameters kept unsharded", r
        assert r["same"] and r["sharded"] and r["left"] == 0 and r["grads"], r
        assert r["bound"] is not None and r["bound"] > 0, r


_SHARDS = textwrap.dedent("""
    import json, os, sys, torch, torch.distributed as dist
    from torch.distributed.fsdp import fully_shard
    from gobrrr.counting import count

    dist.init_process_group("gloo")
    m = torch.nn.Linear(64, 64)
    fully_shard(m)
    opt = torch.optim.SGD(m.parameters(), lr=0.1)
    x = torch.randn(4, 64)

    def step():
        opt.zero_grad()
        m(x).sum().backward()
        opt.step()

    step()
    r = count(step)
    with open(os.path.join(sys.argv[1], f"rank{dist.get_rank()}.json"), "w") as f:
        json.dump([[rec.op, list(rec.out_shape), rec.bytes] for rec in r.records
                   if rec.phase == "optimizer"], f)
    # both ranks done before either tears gloo down: a rank that destroyed its group
    # while its peer still ran died of SIGABRT ("terminate called without an active
    # exception"), once in a full run on a clone beside other work
    dist.barrier()
    dist.destroy_process_group()
    # the results are written: leave without the interpreter's teardown, where a gloo
    # thread still joinable aborted a rank (std::terminate, SIGABRT) in CI simulations
    os._exit(0)
""")


def test_dtensor_ops_counted_on_their_local_shards(dist_env, tmp_path):
    # SGD's update of FSDP2's sharded parameters runs on DTensors: each rank holds half
    # of the 64 x 64 weight (32 x 64) and of the bias (32). p.add_(g, alpha=-lr) reads
    # p and g and writes p: 3 x 2048 x 4 B = 24576 B and 3 x 32 x 4 = 384 B per rank
    # (the global shape counted 49152 and 768 before).
    rows = _rank_results(dist_env, tmp_path, _SHARDS)
    assert rows == [[["aten::add_", [32, 64], 24576], ["aten::add_", [32], 384]]] * 2


@pytest.mark.slow
def test_distributed_optimize_fsdp_comm_remedies_verified(dist_env):
    cmd = [sys.executable, "-m", "gobrrr", "optimize", "--nproc-per-node", "2",
           "examples:fsdp_comm", "--device", "cpu", "--budget-s", "40", "--json", "--only",
           "reshard_after_forward_false,explicit_prefetch,larger_batch_fsdp"]
    p = subprocess.run(cmd, env=dist_env, capture_output=True, text=True, timeout=200)
    assert p.returncode == 0, p.stderr[-3000:]
    d = json.loads(p.stdout)
    assert d["distributed"]["kind"] == "fsdp" and d["distributed"]["world_size"] == 2
    # 8 Linear units x (512^2 + 512) fp32 parameters, unsharded
    assert d["distributed"]["facts"]["grad_bytes"] == 8 * (512 * 512 + 512) * 4
    rows = {r["name"]: r for r in d["remedies"]}
    singles = {"reshard_after_forward_false", "explicit_prefetch", "larger_batch_fsdp"}
    # the stack of the winners is tried too, when both verified faster (a CI simulation
    # saw it; on a loaded 2-core machine either may win or not)
    both_won = all(rows[n]["status"] == "verified"
                   for n in ("reshard_after_forward_false", "explicit_prefetch"))
    assert set(rows) == singles | (
        {"reshard_after_forward_false+explicit_prefetch"} if both_won else set()), rows
    assert rows["larger_batch_fsdp"]["status"] == "advice"
    assert rows["reshard_after_forward_false"]["prediction_basis"]
    assert rows["reshard_after_forward_false"]["checks"]["notes"] == [
        "reshard_after_forward=False on 9 unit(s)"]
    assert rows["explicit_prefetch"]["checks"]["notes"] == [
        "prefetch one unit ahead over 8 block(s)"]
    for name in ("reshard_after_forward_false", "explicit_prefetch"):
        r = rows[name]
        # both keep the numerics: every rank's outputs, the update of its shards over
        # one step and its gradients at fp32's elementwise tolerance
        assert r["status"] in ("verified", "no significant change", "slower"), r["reason"]
        ver = r["checks"]["verification"]
        assert set(ver) == {"rank0", "rank1"}
        for rank in ver.values():
            assert set(rank) == {"outputs", "updates", "grads"}
            assert all(c["ok"] for c in rank.values()), (name, rank)
            assert "elementwise rtol 0.0001" in rank["updates"]["tolerance"]
