"""What rank 0 adds to the merged distributed section: the topology it ran on, the
communication ceilings each collective is compared with, and the projection of the
measured step to more GPUs. Data in, data out; the topology and the ceilings' cache are
read by the caller (diagnose.py), nothing here measures.

- Ceilings: the cached `gobrrr calibrate --distributed` curve for this topology
  (ceilings.load_cached); each collective's achieved bus bandwidth is compared with the
  calibrated busbw *at its own message size* (CommCeilings.busbw_at). Without a cache the
  comparison is left empty and a note says how to fill it.
- Projection (projection.py, docs/multigpu.md): compute_s = the slowest rank's step
  under no_sync() (no communication, the same batch; a synchronous step goes at the
  slowest rank's pace), its overlap likewise; else T_wall minus its exposed
  communication. An FSDP job (its no-communication step keeps the parameters
  unsharded, or its step reduce-scatters and all-reduces nothing) is projected with
  the FSDP model: its reduce-scatters per step are the units, its all-gathers per unit
  the passes, and FSDP2's host work = the step - its exposed communication - the
  unsharded step (the unsharded step removes that work with the wire; it goes with the
  sharding, so it stays in every projected FSDP step). grad_bytes = the bytes of the
  parameters that take a gradient, param_bytes = all parameters' bytes (of the DDP
  module, else of every module the workload reaches, each parameter once: an FSDP2
  DTensor counts its full size);
  overlap = 1 - exposed / total communication of rank 0's profiled steps (the same
  profiled seconds on both sides of the ratio); DDP all-reduces per step = those the
  profiled steps recorded. Intra-node bandwidth: the calibrated curve, else the median
  bus bandwidth of the step's own collectives (said in `projection_bandwidth`).
  The 2-GPU (world size) point is checked against the measured step (`projection_check`).
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping
from typing import Any

from gobrrr import datasheet
from gobrrr.dist.experiments import FSDP_METHOD, find_ddp
from gobrrr.dist.projection import (
    Links,
    StepInputs,
    check_projection,
    gbps_to_bytes_per_s,
    links_from_ceilings,
    overlap_from,
    project,
)
from gobrrr.remedies.comm import CommFacts
from gobrrr.remedies.ddp import DEFAULT_BUCKET_CAP_MB, find_ddps
from gobrrr.remedies.fsdp import find_fsdp
from gobrrr.state import walk

__all__ = ["model_bytes", "ceilings_note", "projection_for", "comm_facts", "grad_bytes_of",
           "CALIBRATE_HINT"]

CALIBRATE_HINT = ("no communication ceilings cached for this topology: each collective's "
                  "% of ceiling is empty; run `torchrun --nproc-per-node N -m gobrrr "
                  "calibrate --distributed` (or `gobrrr calibrate --distributed "
                  "--nproc-per-node N`) once to fill it")


def model_bytes(w: Any) -> tuple[int, int]:
    """(grad_bytes, param_bytes) of the workload's model (module docstring)."""

    ddp = find_ddp(w)
    modules = [ddp.module] if ddp is not None else list(walk(w.fn, w.args, w.kwargs).modules)
    seen: set[int] = set()
    grad = param = 0
    for m in modules:
        for p in m.parameters():
            if id(p) in seen:
                continue
            seen.add(id(p))
            nbytes = p.numel() * p.element_size()
            param += nbytes
            grad += nbytes if p.requires_grad else 0
    return grad, param


def ceilings_note(ceil: Any) -> str | None:
    return None if ceil is not None else CALIBRATE_HINT


def projection_for(d: Mapping[str, Any], grad_bytes: int, param_bytes: int, ceil: Any,
                   inter_node_gbps: float | None) -> dict[str, Any]:
    """{"projection", "projection_bandwidth", "projection_check", "notes"} for the merged
    section `d` (module docstring); projection None with a note when it cannot be made."""

    r0 = next(r for r in d["ranks"] if r["rank"] == 0)
    # A synchronous step goes at its slowest rank's pace: with no_sync paces, the
    # projection starts from the slowest rank (its step, its overlap). From rank 0 alone,
    # the straggler case on two H200s projected 4.2 ms against a measured 35.2 ms.
    paced = [r for r in d["ranks"] if (r.get("no_sync") or {}).get("no_sync_s")]
    if paced:
        r0 = max(paced, key=lambda r: r["no_sync"]["no_sync_s"])
    ns = r0.get("no_sync") or {}
    notes: list[str] = []
    exposed_s = r0["exposed_transfer_s"] + r0["exposed_waiting_profiled_s"]
    calls = _calls_per_step(d["collectives"])
    fsdp = ns.get("method") == FSDP_METHOD or (
        calls.get("reduce_scatter", 0) > 0 and not calls.get("all_reduce"))
    strategy = "fsdp" if fsdp else "ddp"
    host_s = 0.0
    if ns.get("no_sync_s"):
        compute_s = float(ns["no_sync_s"])
        compute_src = f"the slowest rank's (rank {r0['rank']}) step under no_sync()"
        if fsdp:
            # unsharded parameters remove FSDP2's host work with the wire; the work
            # goes with the sharding at any scale, so it stays in the FSDP step
            compute_src = (f"the slowest rank's (rank {r0['rank']}) step with its FSDP2 "
                           "parameters kept unsharded (no collective)")
            host_s = max(0.0, float(ns.get("sync_s") or r0["wall_s"])
                         - r0["exposed_transfer_s"] - r0["exposed_waiting_s"] - compute_s)
    else:
        compute_s = r0["wall_s"] - r0["exposed_transfer_s"] - r0["exposed_waiting_s"]
        compute_src = "rank 0's T_wall minus its exposed communication (no no_sync run)"
    if compute_s <= 0 or grad_bytes <= 0:
        return {"projection": None, "projection_bandwidth": None, "projection_check": None,
                "notes": ["no projection: no compute time or no parameters to "
                          "communicate"]}
    overlap = overlap_from(r0["communication_total_s"], exposed_s)
    all_reduces = calls.get("all_reduce", 0.0)
    inter = gbps_to_bytes_per_s(inter_node_gbps) if inter_node_gbps else None
    inter_src = (f"--inter-node-gbps {inter_node_gbps:g}" if inter_node_gbps else None)
    if ceil is not None:
        links = links_from_ceilings(ceil, inter_node_bytes_per_s=inter)
        bw_src = "measured bus bandwidth (gobrrr calibrate --distributed, cached)"
    else:
        measured = [c["busbw_gbps"] for c in d["collectives"] if c.get("busbw_gbps")]
        if not measured:
            return {"projection": None, "projection_bandwidth": None,
                    "projection_check": None,
                    "notes": ["no projection: no calibrated ceilings and no collective "
                              "with a measured bus bandwidth in the profiled steps"]}
        busbw = statistics.median(measured) * 1e9
        links = Links.constant(busbw, **({"inter_node_bytes_per_s": inter} if inter else
                                         _default_inter()))
        bw_src = (f"the bus bandwidth of this step's own collectives ({busbw / 1e9:.1f} "
                  "GB/s, median; no calibration cached), at every message size")
    units = max(1, round(calls.get("reduce_scatter", 0.0))) if fsdp else 1
    gathers = calls.get("all_gather", 0.0) / units if fsdp and calls.get("all_gather") else 2.0
    step = StepInputs(compute_s=compute_s, grad_bytes=grad_bytes, param_bytes=param_bytes,
                      overlap_fraction=overlap,
                      ddp_buckets=max(1, round(all_reduces)) if all_reduces else None,
                      fsdp_units=units, fsdp_gathers_per_unit=gathers, fsdp_host_s=host_s)
    proj = project(step, links, intra_source=bw_src, inter_source=inter_src)
    proj.assumptions.append({"name": "compute_s", "value": compute_s, "source": compute_src})
    if fsdp:
        proj.assumptions.append({
            "name": "FSDP host work per step (s)", "value": host_s,
            "source": ("the measured step minus its exposed communication minus the "
                       "unsharded step" if ns.get("no_sync_s") else
                       "inside compute_s (no unsharded step measured)")})
    n = int(d["world_size"])
    check = check_projection(step, links, float(d["step_time"]["median_s"]), n_gpus=n,
                             strategy=strategy)
    what = ("no-communication step plus FSDP2's host work" if fsdp
            else "no-communication step")
    check["note"] = (f"the {n}-GPU projection ({'FSDP' if fsdp else 'DDP'} model) from the "
                     f"slowest rank's {what}, the bytes and the overlap, against the "
                     "measured median step")
    return {"projection": proj.to_dict(), "projection_bandwidth": bw_src,
            "projection_check": check, "notes": notes}


def _calls_per_step(collectives: list[Mapping[str, Any]]) -> dict[str, float]:
    """Calls per step of each collective kind (all_reduce, all_gather, ...)."""
    out: dict[str, float] = {}
    for c in collectives:
        out[c["collective"]] = out.get(c["collective"], 0.0) + float(c["calls_per_step"])
    return out


def _default_inter() -> dict[str, Any]:

    return {"inter_node_bytes_per_s": datasheet.INTER_NODE_DEFAULT.bytes_per_s_per_direction}


def grad_bytes_of(modules: list[Any]) -> tuple[int, ...]:
    """Per parameter requiring grad, in registration order, each once, unsharded (a
    DTensor's numel is the global one)."""
    seen: dict[int, Any] = {}
    for m in modules:
        for p in m.parameters():
            if p.requires_grad:
                seen.setdefault(id(p), p)
    return tuple(p.numel() * p.element_size() for p in seen.values())


def comm_facts(modules: list[Any], section: Any, world_size: int,
               comm_ceil: Any | None) -> Any:
    """The communication facts the DDP and FSDP2 remedies predict from (remedies/
    comm.CommFacts), on rank 0: the wrapper the modules hold, their gradient bytes, the
    all-reduce bandwidth (calibrate --distributed's size-dependent curve when cached,
    else this step's achieved busbw), the no_sync bound (the largest over ranks) and
    DDP's own bucket cap. None when the modules hold neither wrapper."""

    ddps = find_ddps(modules)
    kind = "ddp" if ddps else "fsdp" if find_fsdp(modules) else None
    if kind is None:
        return None
    d = section.to_dict() if section is not None else {}
    bounds = [r["no_sync"]["bound_s"] for r in d.get("ranks", [])
              if r.get("no_sync") and r["no_sync"].get("bound_s") is not None]
    busbw: Any = None
    source = ""
    if comm_ceil is not None:
        curve = comm_ceil

        def busbw_fn(size: float) -> float:
            return float(curve.busbw_at("all_reduce", size))

        busbw, source = busbw_fn, "busbw from calibrate --distributed's curve"
    else:
        achieved = [c["busbw_gbps"] for c in d.get("collectives", [])
                    if c.get("collective") == "all_reduce" and c.get("busbw_gbps")]
        if achieved:
            bw = statistics.median(achieved) * 1e9
            busbw = (lambda _s, bw=bw: bw)  # noqa: E731
            source = (f"this step's achieved all-reduce busbw {bw / 1e9:.3g} GB/s, no "
                      "per-call latency (run gobrrr calibrate --distributed for the "
                      "size-dependent curve)")
    cap = None
    if ddps:
        cap_b = getattr(ddps[0], "bucket_bytes_cap", None)
        if cap_b is not None and cap_b != int(DEFAULT_BUCKET_CAP_MB * 2**20):
            cap = cap_b / 2**20
    grads = grad_bytes_of(modules)
    # the budget is rank 0's: its waiting for a late rank is in its exposed part
    waiting = next((r.get("exposed_waiting_s") or 0.0 for r in d.get("ranks", [])
                    if r.get("rank") == 0), 0.0)
    return CommFacts(kind, world_size, grads, busbw, source,
                     max(bounds) if bounds else None, cap, sum(grads), waiting)
