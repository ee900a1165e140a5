"""Beyond one host, on paper: a measured per-GPU step and measured communication ceilings
projected to 2, 4, ..., 1024 GPUs under DDP and FSDP, as step time and scaling
efficiency. Pure functions of their inputs; nothing here measures.

The model (docs/multigpu.md states it in full):

- Weak scaling: the per-GPU batch stays, so the per-GPU compute time `compute_s` stays
  and efficiency(n) = compute_s / step_s(n) (throughput per GPU against one GPU).
- A collective of S bytes (nccl-tests' S: the all-reduce buffer, the all-gather output,
  the reduce-scatter input) on n = g x m GPUs (g per node, m nodes) is hierarchical:
  inside a node a ring over g GPUs, between nodes one ring per local GPU index, each GPU
  with its own NIC (a node's bandwidth B_node split g ways, carrying S/g):
      t = k (g-1)/g S / B_intra(S)  +  k (m-1)/m S / B_node  +  latency
  with k = 2 for all-reduce, 1 for all-gather and reduce-scatter (nccl-tests'
  doc/PERFORMANCE.md factors; the ring's alpha-beta cost, Thakur, Rabenseifner and Gropp,
  "Optimization of Collective Communication Operations in MPICH", IJHPCA 2005: ring
  all-reduce 2(p-1) alpha + 2 (p-1)/p n beta).
  B_intra(S) is the measured bus bandwidth at that size (CommCeilings.busbw_at): it holds
  the intra-node latency at the calibrated rank count, so no intra alpha is added.
  latency = alpha_inter x the steps between nodes: ring all-gather / reduce-scatter m-1;
  all-reduce min(2(m-1), 2 ceil(log2 m)) because NCCL runs a tree when the ring's latency
  is larger (its bandwidth term is kept the ring's). alpha_inter defaults to 14 us, NCCL's
  own network ring latency for the Simple protocol (hwLat[NET][Ring][Simple],
  src/graph/tuning.cc).
- DDP: all-reduce of the gradient bytes in buckets (default ceil(grad / 25 MiB), DDP's
  bucket_cap_mb); FSDP (FULL_SHARD): all-gather of the parameters `fsdp_gathers_per_unit`
  times a step (2 when each unit reshards after forward: forward and backward; 1 when it
  keeps them), reduce-scatter of the gradients, in `fsdp_units` pieces each.
- FSDP's host work (`fsdp_host_s`): what sharding adds to a step besides the wire (its
  hooks, DTensor dispatch, the copies into and out of the collectives' buffers, freeing
  and re-allocating the unsharded parameters, the sharded optimizer step). On two H200s
  it was most of a communication-bound FSDP2 step (examples:fsdp_comm: 35 ms against
  7.7 ms unsharded and 5.3 ms of exposed transfer), so an FSDP step is
  compute_s + fsdp_host_s, held constant in n (measured at the world size the job ran;
  0 where no FSDP job was measured). DDP's step has none of it.
- Overlap: the measured share `overlap_fraction` of communication hidden stays hidden,
  but never more than the rest of the step:
      step_s = base_s + comm_s - min(overlap_fraction x comm_s, base_s),
  base_s = compute_s (DDP) or compute_s + fsdp_host_s (FSDP).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from gobrrr import datasheet

__all__ = ["StepInputs", "Links", "ProjectionRow", "Projection", "project",
           "collective_time_s", "step_time_s", "strategy_step_s", "base_s",
           "check_projection", "overlap_from", "comm_time_s", "links_from_ceilings",
           "GPU_COUNTS", "DDP_BUCKET_BYTES", "INTER_HOP_LATENCY_S", "gbps_to_bytes_per_s"]

SCHEMA_VERSION = 1
GPU_COUNTS: tuple[int, ...] = tuple(2**k for k in range(1, 11))  # 2 .. 1024
DDP_BUCKET_BYTES = 25 * 2**20  # torch DDP's bucket_cap_mb default, 25 MiB
# NCCL src/graph/tuning.cc, hwLat[NCCL_HW_NET][Ring][Simple] = 14 us: NCCL's own model of
# one network step of a ring.
INTER_HOP_LATENCY_S = 14e-6
_K = {"all_reduce": 2, "all_gather": 1, "reduce_scatter": 1}


def gbps_to_bytes_per_s(gbps: float) -> float:
    """--inter-node-gbps is gigabits per second per node and direction (NICs are sold in
    Gb/s): 3200 Gb/s (8 x 400 Gb/s NDR) = 400e9 bytes/s."""
    return gbps * 1e9 / 8


def overlap_from(comm_s: float, exposed_comm_s: float) -> float:
    """The share of communication hidden by compute: 1 - exposed / total (1 when there is
    no communication: nothing to expose)."""
    if comm_s <= 0:
        return 1.0
    return min(1.0, max(0.0, 1.0 - exposed_comm_s / comm_s))


@dataclass(frozen=True)
class StepInputs:
    """One GPU's step, measured: what the projection needs from a diagnosis."""

    compute_s: float  # the step without communication (1 GPU, or DDP under no_sync)
    grad_bytes: float  # bytes all-reduced (DDP) or reduce-scattered (FSDP) per step
    param_bytes: float  # bytes all-gathered per FSDP pass (the unsharded parameters)
    overlap_fraction: float  # share of communication hidden by compute, 0..1 (measured)
    ddp_buckets: int | None = None  # all-reduces per step; default ceil(grad / 25 MiB)
    fsdp_units: int = 1  # fully_shard units: one reduce-scatter each
    fsdp_gathers_per_unit: float = 2.0  # all-gathers per unit and step (reshard: 2)
    fsdp_host_s: float = 0.0  # FSDP's host work per step (module docstring)

    def buckets(self) -> int:
        if self.ddp_buckets is not None:
            return self.ddp_buckets
        return max(1, math.ceil(self.grad_bytes / DDP_BUCKET_BYTES))


@dataclass(frozen=True)
class Links:
    """The bandwidths and latency the model uses. `intra_busbw` gives the intra-node bus
    bandwidth (bytes/s) of a collective at a size: the measured ceilings, or a constant."""

    intra_busbw: Callable[[str, float], float]
    inter_node_bytes_per_s: float  # per node and direction
    inter_hop_latency_s: float = INTER_HOP_LATENCY_S
    gpus_per_node: int = 8

    @classmethod
    def constant(cls, intra_busbw_bytes_per_s: float, **kw: Any) -> Links:
        return cls(intra_busbw=lambda _c, _s: intra_busbw_bytes_per_s, **kw)


def _layout(n: int, gpus_per_node: int) -> tuple[int, int]:
    """(GPUs per node used, nodes): n <= gpus_per_node fits one node."""
    g = min(n, gpus_per_node)
    return g, math.ceil(n / g)


def collective_time_s(collective: str, size_bytes: float, n: int, links: Links) -> float:
    """Seconds for one collective of `size_bytes` (nccl-tests' S) on n GPUs (module
    docstring: the hierarchical ring, plus the inter-node latency)."""
    if n <= 1 or size_bytes <= 0:
        return 0.0
    k = _K[collective]
    g, m = _layout(n, links.gpus_per_node)
    t = 0.0
    if g > 1:
        t += k * (g - 1) / g * size_bytes / links.intra_busbw(collective, size_bytes)
    if m > 1:
        t += k * (m - 1) / m * size_bytes / links.inter_node_bytes_per_s
        steps = (min(2 * (m - 1), 2 * math.ceil(math.log2(m))) if collective == "all_reduce"
                 else m - 1)
        t += steps * links.inter_hop_latency_s
    return t


def comm_time_s(strategy: str, step: StepInputs, n: int, links: Links) -> float:
    """Communication seconds per step of `strategy` ("ddp" | "fsdp") on n GPUs."""
    if strategy == "ddp":
        b = step.buckets()
        return b * collective_time_s("all_reduce", step.grad_bytes / b, n, links)
    if strategy == "fsdp":
        u = step.fsdp_units
        return u * (step.fsdp_gathers_per_unit
                    * collective_time_s("all_gather", step.param_bytes / u, n, links)
                    + collective_time_s("reduce_scatter", step.grad_bytes / u, n, links))
    raise ValueError(f"unknown strategy {strategy!r}; 'ddp' or 'fsdp'")


def step_time_s(compute_s: float, comm_s: float, overlap_fraction: float) -> float:
    """compute + the communication compute does not hide (at most compute_s is hidden)."""
    return compute_s + comm_s - min(overlap_fraction * comm_s, compute_s)


def base_s(strategy: str, step: StepInputs) -> float:
    """The step without its communication under `strategy`: compute_s, plus FSDP's host
    work for FSDP (module docstring)."""
    return step.compute_s + (step.fsdp_host_s if strategy == "fsdp" else 0.0)


def strategy_step_s(strategy: str, step: StepInputs, n: int, links: Links,
                    overlap_fraction: float | None = None) -> tuple[float, float]:
    """(communication seconds, step seconds) of `strategy` on n GPUs."""
    comm = comm_time_s(strategy, step, n, links)
    ov = step.overlap_fraction if overlap_fraction is None else overlap_fraction
    return comm, step_time_s(base_s(strategy, step), comm, ov)


@dataclass(frozen=True)
class ProjectionRow:
    n_gpus: int
    nodes: int
    ddp_comm_s: float
    ddp_step_s: float
    ddp_efficiency: float
    fsdp_comm_s: float
    fsdp_step_s: float
    fsdp_efficiency: float


@dataclass
class Projection:
    inputs: dict[str, Any]
    assumptions: list[dict[str, Any]]  # {"name", "value", "source"}
    rows: list[ProjectionRow]
    sensitivity: list[dict[str, Any]]  # {"assumption", "value", "ddp_efficiency", ...}
    sensitivity_at: int
    conclusion: str
    notes: list[str] = field(default_factory=list)
    schema_version: int = SCHEMA_VERSION

    def row(self, n_gpus: int) -> ProjectionRow:
        return next(r for r in self.rows if r.n_gpus == n_gpus)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["schema"] = "gobrrr.projection"
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Projection:
        """The inverse of to_dict (a saved report's `distributed.projection`)."""
        return cls(inputs=dict(d["inputs"]), assumptions=list(d["assumptions"]),
                   rows=[ProjectionRow(**r) for r in d["rows"]],
                   sensitivity=list(d["sensitivity"]), sensitivity_at=d["sensitivity_at"],
                   conclusion=d["conclusion"], notes=list(d.get("notes", [])),
                   schema_version=d.get("schema_version", SCHEMA_VERSION))


def _efficiencies(step: StepInputs, n: int, links: Links, overlap: float
                  ) -> tuple[float, float, float, float, float, float]:
    out: list[float] = []
    for strategy in ("ddp", "fsdp"):
        comm, t = strategy_step_s(strategy, step, n, links, overlap)
        out += [comm, t, step.compute_s / t]
    return (out[0], out[1], out[2], out[3], out[4], out[5])


def project(
    step: StepInputs,
    links: Links,
    *,
    gpu_counts: Sequence[int] = GPU_COUNTS,
    sensitivity_at: int = 64,
    intra_source: str = "measured bus bandwidth (gobrrr calibrate --distributed)",
    inter_source: str | None = None,
) -> Projection:
    """Step time and scaling efficiency for DDP and FSDP at each of `gpu_counts`, the
    assumptions behind them, and how efficiency at `sensitivity_at` GPUs moves with half
    and double the inter-node bandwidth and with overlap 0 and 1."""
    if step.compute_s <= 0:
        raise ValueError(f"compute_s {step.compute_s} must be positive")
    if not 0 <= step.overlap_fraction <= 1:
        raise ValueError(f"overlap_fraction {step.overlap_fraction} outside 0..1")
    rows = []
    for n in gpu_counts:
        e = _efficiencies(step, n, links, step.overlap_fraction)
        rows.append(ProjectionRow(n, _layout(n, links.gpus_per_node)[1], *e))
    n_s = sensitivity_at
    base = _efficiencies(step, n_s, links, step.overlap_fraction)
    variants: list[tuple[str, str, Links, float]] = [
        ("inter-node bandwidth", "x0.5",
         replace(links, inter_node_bytes_per_s=links.inter_node_bytes_per_s / 2),
         step.overlap_fraction),
        ("inter-node bandwidth", "x2",
         replace(links, inter_node_bytes_per_s=links.inter_node_bytes_per_s * 2),
         step.overlap_fraction),
        ("overlap", "0", links, 0.0),
        ("overlap", "1", links, 1.0),
    ]
    sensitivity: list[dict[str, Any]] = []
    for name, value, lk, ov in variants:
        e = _efficiencies(step, n_s, lk, ov)
        sensitivity.append({
            "assumption": name, "value": value,
            "ddp_efficiency": e[2], "fsdp_efficiency": e[5],
            "ddp_change_points": 100 * (e[2] - base[2]),
            "fsdp_change_points": 100 * (e[5] - base[5]),
        })
    biggest = max(sensitivity, key=lambda s: max(abs(s["ddp_change_points"]),
                                                 abs(s["fsdp_change_points"])))
    conclusion = (
        f"At {n_s} GPUs: DDP {100 * base[2]:.0f}%, FSDP {100 * base[5]:.0f}% efficient. "
        f"The {biggest['assumption']} moves it most: with {biggest['assumption']} "
        f"{biggest['value']}, DDP "
        f"{biggest['ddp_change_points']:+.0f} points, FSDP "
        f"{biggest['fsdp_change_points']:+.0f} points.")
    inter = inter_source or datasheet.INTER_NODE_DEFAULT.source
    assumptions: list[dict[str, Any]] = [
        {"name": "scaling", "value": "weak: the per-GPU batch and compute_s stay",
         "source": "model"},
        {"name": "intra-node bus bandwidth", "value": "busbw at each message size",
         "source": intra_source},
        {"name": "inter-node bandwidth per node and direction",
         "value": links.inter_node_bytes_per_s, "source": inter},
        {"name": "inter-node latency per ring step (s)", "value": links.inter_hop_latency_s,
         "source": "NCCL src/graph/tuning.cc hwLat[NET][Ring][Simple]"},
        {"name": "GPUs per node", "value": links.gpus_per_node, "source": "default 8 (DGX)"},
        {"name": "overlap (share of communication hidden)", "value": step.overlap_fraction,
         "source": "measured"},
        {"name": "DDP all-reduces per step", "value": step.buckets(),
         "source": "given" if step.ddp_buckets is not None else "ceil(grad / 25 MiB)"},
        {"name": "FSDP units", "value": step.fsdp_units, "source": "given"},
        {"name": "FSDP all-gathers per unit and step", "value": step.fsdp_gathers_per_unit,
         "source": "given"},
        {"name": "FSDP host work per step (s), constant in n", "value": step.fsdp_host_s,
         "source": "given"},
        {"name": "collectives", "value": "hierarchical ring (tree latency for all-reduce "
                                         "across nodes), alpha-beta", "source": "model"},
    ]
    return Projection(inputs=asdict(step), assumptions=assumptions, rows=rows,
                      sensitivity=sensitivity, sensitivity_at=n_s, conclusion=conclusion)


def links_from_ceilings(ceilings: Any, *, inter_node_bytes_per_s: float | None = None,
                        inter_hop_latency_s: float = INTER_HOP_LATENCY_S,
                        gpus_per_node: int = 8) -> Links:
    """Links from measured CommCeilings (dist/ceilings.py); the inter-node bandwidth from
    the argument, else the datasheet default (8 x 400 Gb/s InfiniBand NDR per node)."""
    return Links(
        intra_busbw=ceilings.busbw_at,
        inter_node_bytes_per_s=(inter_node_bytes_per_s if inter_node_bytes_per_s
                                else datasheet.INTER_NODE_DEFAULT.bytes_per_s_per_direction),
        inter_hop_latency_s=inter_hop_latency_s, gpus_per_node=gpus_per_node)


def check_projection(step: StepInputs, links: Links, measured_step_s: float, *,
                     n_gpus: int = 2, strategy: str = "ddp") -> dict[str, Any]:
    """The model against a measurement: `step` from one GPU (compute_s, bytes, overlap),
    projected to `n_gpus`, compared with the step measured there. rel_error =
    (projected - measured) / measured."""
    comm, projected = strategy_step_s(strategy, step, n_gpus, links)
    return {"n_gpus": n_gpus, "strategy": strategy, "projected_step_s": projected,
            "measured_step_s": measured_step_s, "comm_s": comm,
            "rel_error": (projected - measured_step_s) / measured_step_s}
