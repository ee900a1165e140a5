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
(compute_s) and the FSDP2 step on a one-rank mesh, whose difference is FSDP2's host work
(its collectives are copies there); on both ranks the FSDP2 step. Projected with the FSDP
model (two all-gathers and one reduce-scatter per unit, the host work in every step) at
overlap 0 and 1.

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


def _fsdp_case(name: str, depth: int, width: int, batch: int, device: torch.device,
               ceil, n_steps: int) -> dict:
    from torch.distributed.device_mesh import DeviceMesh, init_device_mesh

    rank = dist.get_rank()
    x = torch.randn(batch, width, device=device)
    solo = dist.new_group([0])  # every rank takes part in making it
    compute_s = fsdp1_s = 0.0
    if rank == 0:
        plain = _model(depth, width, device)
        opt = torch.optim.SGD(plain.parameters(), lr=1e-6)

        def one() -> None:
            opt.zero_grad(set_to_none=True)
            plain(x).square().mean().backward()
            opt.step()

        compute_s = _timed(one, device, n_steps)
        m1 = _fsdp_model(width, depth, device, DeviceMesh.from_group(solo, device.type))
        opt1 = torch.optim.SGD(m1.parameters(), lr=1e-6)

        def one_fsdp() -> None:
            opt1.zero_grad(set_to_none=True)
            m1(x).square().mean().backward()
            opt1.step()

        fsdp1_s = _timed(one_fsdp, device, n_steps)
        del plain, m1, opt, opt1
    dist.barrier()
    mesh = init_device_mesh(device.type, (dist.get_world_size(),))
    m = _fsdp_model(width, depth, device, mesh)
    opt = torch.optim.SGD(m.parameters(), lr=1e-6)

    def synced() -> None:
        opt.zero_grad(set_to_none=True)
        m(x).square().mean().backward()
        opt.step()

    dist.barrier()
    t_sync = _timed(synced, device, n_steps)
    param_bytes = width * width * depth * 4 + width * depth * 4
    out = {"case": name, "strategy": "fsdp", "layers": depth, "width": width,
           "batch": batch, "grad_bytes": param_bytes, "compute_1gpu_s": compute_s,
           "fsdp_1gpu_s": fsdp1_s, "host_work_1gpu_s": fsdp1_s - compute_s,
           "step_2gpu_s": t_sync}
    if rank == 0:
        links = pj.links_from_ceilings(ceil)
        host = max(0.0, fsdp1_s - compute_s)
        out["checks"] = {}
        for label, ov in (("overlap 0", 0.0), ("overlap 1", 1.0)):
            step = pj.StepInputs(compute_s, param_bytes, param_bytes, ov,
                                 fsdp_units=depth, fsdp_host_s=host)
            out["checks"][label] = pj.check_projection(step, links, t_sync, strategy="fsdp")
        out["model_comm_s"] = out["checks"]["overlap 0"]["comm_s"]
    return out


def main() -> None:
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
            extra = (f"no_sync {1e3 * r['step_2gpu_no_sync_s']:.2f} ms"
                     if "step_2gpu_no_sync_s" in r else
                     f"FSDP2 on one GPU {1e3 * r['fsdp_1gpu_s']:.2f} ms")
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
