"""The projection's check (issue 14, item 6): a DDP step projected to 2 GPUs from one
GPU's measurements plus the calibrated bus bandwidth, against the measured 2-GPU step.

Run under torchrun after `gobrrr calibrate --distributed` has cached the ceilings (same
XDG_CACHE_HOME); benchmarks/dist_calibrate.sh does both. Two cases: a deep stack of wide
Linear layers at a small batch (communication-bound) and a few layers at a large batch
(compute-bound). Per case, on rank 0 alone: the 1-GPU step (forward, backward, SGD step;
no DDP) = compute_s; then on both ranks under DDP: the step with gradient sync and under
no_sync(). The projection is shown at overlap 0 and 1 (the bounds a 1-GPU measurement
allows) and at the overlap implied by the no_sync experiment (exposed = T_sync - T_nosync
against the model's communication time), with each one's relative error.

The FSDP2 pair (issue 27, item 2: examples:fsdp_comm and fsdp_compute's shapes, every
Linear a `fully_shard` unit and the root one too, SGD): on rank 0 alone the plain step
(compute_s) and the FSDP2 step on a one-rank mesh, whose difference is FSDP2's host work;
on both ranks the FSDP2 step. Projected with the FSDP model (two all-gathers and one
reduce-scatter per unit, the host work in every step) at overlap 0 and 1. On a one-rank
mesh FSDP2 skips its collectives' paths (torch's _fsdp_param_group.py: `if world_size ==
1`, no all-gather copy-in or copy-out, no collective call), so that host work is short of
a real job's (run 4 on two H200s: -25% on fsdp_comm). So the FSDP2 step is also timed on
rank 0's GPU alone in a process of its own under torch's fake process group of the job's
world size (`--fake-world N`: every collective a no-op, FSDP2's own work around each
one as in the job, each rank's shard): the check "... fake world N" projects from that.

    torchrun --standalone --nproc-per-node 2 benchmarks/dist_projection_check.py OUT.json
Works on CPU (gloo) with --small, for a smoke test.
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import time

import torch
import torch.distributed as dist
from torch import nn

from gobrrr.dist import projection as pj
from gobrrr.dist.ceilings import ensure_process_group, load_cached


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize()


def _timed(step, device: torch.device, n: int, warmup: int = 3) -> float:
    """Median seconds of `n` steps, each between synchronizations, after a barrier."""
    for _ in range(warmup):
        step()
    times = []
    for _ in range(n):
        _sync(device)
        t0 = time.perf_counter()
        step()
        _sync(device)
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def _model(layers: int, width: int, device: torch.device) -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(*[nn.Linear(width, width) for _ in range(layers)]).to(device)


def _case(name: str, layers: int, width: int, batch: int, device: torch.device,
          ceil, n_steps: int) -> dict:
    rank = dist.get_rank()
    x = torch.randn(batch, width, device=device)
    # 1 GPU: rank 0 alone (rank 1 waits at the barrier below).
    compute_s = 0.0
    if rank == 0:
        m = _model(layers, width, device)
        opt = torch.optim.SGD(m.parameters(), lr=1e-6)

        def one() -> None:
            opt.zero_grad(set_to_none=True)
            m(x).square().mean().backward()
            opt.step()

        compute_s = _timed(one, device, n_steps)
    dist.barrier()
    m = _model(layers, width, device)
    ddp = nn.parallel.DistributedDataParallel(
        m, device_ids=[device.index] if device.type == "cuda" else None)
    opt = torch.optim.SGD(ddp.parameters(), lr=1e-6)

    def synced() -> None:
        opt.zero_grad(set_to_none=True)
        ddp(x).square().mean().backward()
        opt.step()

    def unsynced() -> None:
        opt.zero_grad(set_to_none=True)
        with ddp.no_sync():
            ddp(x).square().mean().backward()
        opt.step()

    dist.barrier()
    t_sync = _timed(synced, device, n_steps)
    dist.barrier()
    t_nosync = _timed(unsynced, device, n_steps)
    grad_bytes = sum(p.numel() * p.element_size() for p in m.parameters())
    out = {"case": name, "layers": layers, "width": width, "batch": batch,
           "grad_bytes": grad_bytes, "compute_1gpu_s": compute_s, "step_2gpu_s": t_sync,
           "step_2gpu_no_sync_s": t_nosync}
    if rank == 0:
        links = pj.links_from_ceilings(ceil)
        base = pj.StepInputs(compute_s=compute_s, grad_bytes=grad_bytes,
                             param_bytes=grad_bytes, overlap_fraction=0.0)
        comm = pj.comm_time_s("ddp", base, 2, links)
        implied = pj.overlap_from(comm, max(0.0, t_sync - t_nosync))
        out["model_comm_s"] = comm
        out["checks"] = {}
        for label, ov in (("overlap 0", 0.0), ("overlap 1", 1.0),
                          (f"overlap {implied:.2f} (no_sync)", implied)):
            step = pj.StepInputs(compute_s, grad_bytes, grad_bytes, ov)
            out["checks"][label] = pj.check_projection(step, links, t_sync)
    return out


def _fsdp_model(width: int, depth: int, device: torch.device, mesh) -> nn.Module:
    from torch.distributed.fsdp import fully_shard

    m = _model(depth, width, device)
    for layer in m:
        fully_shard(layer, mesh=mesh)
    fully_shard(m, mesh=mesh)
    return m


def _fsdp_step_s(depth: int, width: int, batch: int, device: torch.device, mesh,
                 n_steps: int) -> float:
    """The FSDP2 step's median seconds on `mesh`."""
    x = torch.randn(batch, width, device=device)
    m = _fsdp_model(width, depth, device, mesh)
    opt = torch.optim.SGD(m.parameters(), lr=1e-6)

    def one() -> None:
        opt.zero_grad(set_to_none=True)
        m(x).square().mean().backward()
        opt.step()

    return _timed(one, device, n_steps)


def fake_world_main(world: int, depth: int, width: int, batch: int, n_steps: int) -> None:
    """`--fake-world N DEPTH WIDTH BATCH STEPS`: this process alone (rank 0 of a fake
    world of N: torch's fake process group, whose collectives do nothing) times the FSDP2
    step and prints {"fsdp_fake_world_s": ...}. The all-gathered parameters hold
    whatever memory they were given: the time is the point, not the values."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.testing._internal.distributed.fake_pg import FakeStore

    device = (torch.device("cuda", 0) if torch.cuda.is_available() else torch.device("cpu"))
    if device.type == "cuda":
        torch.cuda.set_device(device)
    dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=world)
    try:
        mesh = init_device_mesh(device.type, (world,))
        step_s = _fsdp_step_s(depth, width, batch, device, mesh, n_steps)
    finally:
        dist.destroy_process_group()
    print(json.dumps({"fsdp_fake_world_s": step_s}))


def _fake_world_s(world: int, depth: int, width: int, batch: int, device: torch.device,
                  n_steps: int) -> float | None:
    """`fake_world_main` in a child on this rank's GPU; None where it failed (said)."""
    import subprocess

    env = dict(os.environ)
    for k in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "MASTER_ADDR",
              "MASTER_PORT", "TORCHELASTIC_RUN_ID", "GROUP_RANK", "ROLE_RANK"):
        env.pop(k, None)
    if device.type == "cuda":  # this rank's GPU, through any mask the job was given
        visible = os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",")
        index = device.index or 0
        env["CUDA_VISIBLE_DEVICES"] = (visible[index] if len(visible) > index and
                                       visible[index] else str(index))
    cmd = [sys.executable, os.path.abspath(__file__), "--fake-world", str(world),
           str(depth), str(width), str(batch), str(n_steps)]
    p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    try:
        return float(json.loads(p.stdout.strip().splitlines()[-1])["fsdp_fake_world_s"])
    except (IndexError, KeyError, ValueError):
        print(f"fake world {world}: failed (rc {p.returncode}): {p.stderr[-800:]}",
              file=sys.stderr)
        return None


def _fsdp_case(name: str, depth: int, width: int, batch: int, device: torch.device,
               ceil, n_steps: int) -> dict:
    from torch.distributed.device_mesh import DeviceMesh, init_device_mesh

    rank = dist.get_rank()
    x = torch.randn(batch, width, device=device)
    solo = dist.new_group([0])  # every rank takes part in making it
    compute_s = fsdp1_s = 0.0
    fake_s: float | None = None
    if rank == 0:
        plain = _model(depth, width, device)
        opt = torch.optim.SGD(plain.parameters(), lr=1e-6)

        def one() -> None:
            opt.zero_grad(set_to_none=True)
            plain(x).square().mean().backward()
            opt.step()

        compute_s = _timed(one, device, n_steps)
        del plain, opt
        fsdp1_s = _fsdp_step_s(depth, width, batch, device,
                               DeviceMesh.from_group(solo, device.type), n_steps)
        fake_s = _fake_world_s(dist.get_world_size(), depth, width, batch, device, n_steps)
    dist.barrier()
    # the warm-up steps' collectives bring the ranks into step before the timed ones
    t_sync = _fsdp_step_s(depth, width, batch, device,
                          init_device_mesh(device.type, (dist.get_world_size(),)), n_steps)
    param_bytes = width * width * depth * 4 + width * depth * 4
    out = {"case": name, "strategy": "fsdp", "layers": depth, "width": width,
           "batch": batch, "grad_bytes": param_bytes, "compute_1gpu_s": compute_s,
           "fsdp_1gpu_s": fsdp1_s, "host_work_1gpu_s": fsdp1_s - compute_s,
           "fsdp_fake_world_s": fake_s,
           "host_work_fake_world_s": None if fake_s is None else fake_s - compute_s,
           "step_2gpu_s": t_sync}
    if rank == 0:
        links = pj.links_from_ceilings(ceil)
        host = max(0.0, fsdp1_s - compute_s)
        out["checks"] = {}
        hosts = [("", host)]
        if fake_s is not None:
            hosts.append((f", fake world {dist.get_world_size()}",
                          max(0.0, fake_s - compute_s)))
        for suffix, h in hosts:
            for label, ov in (("overlap 0", 0.0), ("overlap 1", 1.0)):
                step = pj.StepInputs(compute_s, param_bytes, param_bytes, ov,
                                     fsdp_units=depth, fsdp_host_s=h)
                out["checks"][label + suffix] = pj.check_projection(step, links, t_sync,
                                                                    strategy="fsdp")
        out["model_comm_s"] = out["checks"]["overlap 0"]["comm_s"]
    return out


def main() -> None:
    if "--fake-world" in sys.argv:
        i = sys.argv.index("--fake-world")
        world, depth, width, batch, n = (int(v) for v in sys.argv[i + 1:i + 6])
        fake_world_main(world, depth, width, batch, n)
        return
    small = "--small" in sys.argv
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    out_path = args[0] if args else "projection_check.json"
    created = ensure_process_group(120)
    device = (torch.device("cuda", torch.cuda.current_device()) if torch.cuda.is_available()
              else torch.device("cpu"))
    ceil = load_cached()
    if dist.get_rank() == 0 and ceil is None:
        print("no cached communication ceilings: run gobrrr calibrate --distributed first",
              file=sys.stderr)
    # Every rank reads the same cache file, so all or none of them go on.
    cases = ([("comm-bound", 4, 256, 8, 5), ("compute-bound", 2, 256, 512, 5)] if small else
             [("comm-bound", 24, 4096, 8, 20), ("compute-bound", 4, 4096, 16384, 20)])
    fsdp_cases = ([("fsdp_comm", 8, 512, 4, 5), ("fsdp_compute", 2, 256, 8192, 5)]
                  if small else
                  [("fsdp_comm", 12, 4096, 4, 20), ("fsdp_compute", 2, 4096, 16384, 20)])
    results = [_case(name, layers, width, batch, device, ceil, n)
               for name, layers, width, batch, n in cases] if ceil is not None else []
    if ceil is not None and "--no-fsdp" not in sys.argv:
        results += [_fsdp_case(name, layers, width, batch, device, ceil, n)
                    for name, layers, width, batch, n in fsdp_cases]
    if dist.get_rank() == 0:
        doc = {"world_size": dist.get_world_size(), "backend": str(dist.get_backend()),
               "torch": torch.__version__,
               "ceilings_measured_at": ceil.measured_at if ceil else None,
               "cases": results}
        with open(out_path, "w") as f:
            json.dump(doc, f, indent=2)
        for r in results:
            fake = r.get("fsdp_fake_world_s")
            extra = (f"no_sync {1e3 * r['step_2gpu_no_sync_s']:.2f} ms"
                     if "step_2gpu_no_sync_s" in r else
                     f"FSDP2 on one GPU {1e3 * r['fsdp_1gpu_s']:.2f} ms"
                     + ("" if fake is None else
                        f", in a fake world of {dist.get_world_size()} {1e3 * fake:.2f} ms"))
            print(f"{r['case']}: 1-GPU {1e3 * r['compute_1gpu_s']:.2f} ms, 2-GPU "
                  f"{1e3 * r['step_2gpu_s']:.2f} ms ({extra}), model comm "
                  f"{1e3 * r['model_comm_s']:.2f} ms")
            for label, c in r["checks"].items():
                print(f"    {label}: projected {1e3 * c['projected_step_s']:.2f} ms, "
                      f"error {100 * c['rel_error']:+.1f}%")
    if created:
        dist.destroy_process_group()
    if os.environ.get("RANK", "0") == "0" and ceil is None:
        sys.exit(2)


if __name__ == "__main__":
    main()
