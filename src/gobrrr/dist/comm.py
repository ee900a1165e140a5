"""Communication in a profiled window: which work is a collective, how much of it nothing
hides (exposed), and, across ranks, how much of a collective is transfer and how much is
waiting for a late rank. Pure functions of traces: no process group here.

Where the facts come from (torch.profiler's Chrome trace of each rank, read by
commread.read_trace):
- CUDA (NCCL): a kernel is communication when the profiler's collective metadata says so:
  the kernel's own args carry "Collective name" (Kineto copies `record_param_comms`'s
  metadata onto NCCL kernels), else its launch (linked by "correlation") lies inside a
  `record_param_comms` CPU op. Never by kernel-name prefixes (NCCL renamed `ncclKernel*` to
  `ncclDevKernel_*`). Compute is every other kernel, memcpy and memset of this device.
  Matching key: ("Process Group Name", "Seq") when recorded.
- CPU (gloo): there are no kernels. gloo runs each collective on one of its worker threads
  inside a profiler range `gloo:<collective>` (with the tensor's dims and dtype), and
  records no `record_param_comms`, group name or sequence number (seen with torch 2.13).
  Communication is those ranges and the time the step's thread spends inside a
  collective op (`c10d::*`: blocked handing work to gloo); compute is the union of the
  `aten::` ops on the thread that ran the step, minus the collective ops launched from
  it (`c10d::*`, which block while gloo's queue is busy). A worker thread is the CPU's
  "communication stream", the step's thread its "compute stream", and the same interval
  arithmetic applies: exposed
  communication is gloo time during which the step's thread ran no op (it was waiting in
  DDP's end-of-backward or in Python), and the step thread's idle stretch before it
  copies an all-reduced bucket back, where it outlasts gloo's range (the thread woke
  late: commread._waited_for_buckets). Matching key: (group, order in the window): every
  rank profiles the same calls and a process group's collectives are issued in the same
  order on every rank, so the n-th collective is the same one everywhere (one process
  group: gloo names none, so collectives of two groups could be confused).

Transfer vs waiting (`match_collectives`): a collective starts on each rank when that rank
issues it and ends on all ranks together; the rank that arrived last waited least, so the
shortest duration across ranks is the transfer, and the rest of each rank's duration is
waiting for a late rank (skew), placed at the start of its interval.

Bus bandwidth by the nccl-tests definitions (PERFORMANCE.md of NVIDIA/nccl-tests):
algbw = bytes / time; busbw = algbw x 2(n-1)/n for all-reduce, x (n-1)/n for all-gather,
reduce-scatter and all-to-all, x 1 for broadcast and reduce. bytes: the all-reduce
buffer; all-gather: the gathered output; reduce-scatter: the full input.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from gobrrr.intervals import Interval, exposed_us, subtract_list, total_us

__all__ = ["Collective", "RankTrace", "busbw_factor", "bandwidth_gbps", "Matched",
           "match_collectives", "exposed_split_us", "normalise_collective", "WINDOW",
           "BUCKET_COPY_RANGES", "COPY_BACK_RANGE", "element_bytes",
           "least_step_waiting_us"]

# The profiler range around the profiled steps on every rank (dist/diagnose.py).
WINDOW = "gobrrr:dist-window"

# The profiler ranges DDP's C++ reducer opens around its gradient copies
# (torch/csrc/distributed/c10d/reducer.cpp, torch 2.x): `mul_out` copies a gradient into
# its bucket and divides it by the world size in one pass (no comm hook); `copy_` copies
# it (with a comm hook, which divides); `copy_bucket_to_grad` copies the all-reduced
# bucket back into the gradient. Work launched inside them is the bucket copies that
# no_sync() removes and gradient_as_bucket_view=True avoids (the gradients are views of
# the buckets): named by the reducer itself, never guessed from kernel names.
COPY_BACK_RANGE = "torch.distributed.ddp.reducer::copy_bucket_to_grad"
BUCKET_COPY_RANGES = frozenset({
    "torch::distributed::reducer::mul_out", "torch::distributed::reducer::copy_",
    COPY_BACK_RANGE})


# Collective names as the profiler writes them (NCCL's record_param_comms, gloo's ranges,
# functional collectives) -> one name per collective.
_COLLECTIVES = {
    "allreduce": "all_reduce", "all_reduce": "all_reduce", "allreduce_coalesced":
    "all_reduce", "allreduce_sparse": "all_reduce",
    "allgather": "all_gather", "all_gather": "all_gather", "_allgather_base": "all_gather",
    "allgather_into_tensor_coalesced": "all_gather", "all_gather_into_tensor": "all_gather",
    "allgather_coalesced": "all_gather",
    "reduce_scatter": "reduce_scatter", "_reduce_scatter_base": "reduce_scatter",
    "reduce_scatter_tensor": "reduce_scatter", "reduce_scatter_tensor_coalesced":
    "reduce_scatter", "reducescatter": "reduce_scatter",
    "broadcast": "broadcast", "reduce": "reduce", "alltoall": "all_to_all",
    "all_to_all": "all_to_all", "alltoall_base": "all_to_all", "all_to_allv": "all_to_all",
    "barrier": "barrier", "gather": "gather", "scatter": "scatter", "send": "send",
    "recv": "recv",
}


def normalise_collective(raw: str) -> str:
    name = raw.split(":", 1)[-1].strip().lower()
    return _COLLECTIVES.get(name, name)


def busbw_factor(collective: str, n: int) -> float:
    """nccl-tests' bus-bandwidth factor for `n` ranks (module docstring)."""
    if n <= 1:
        return 1.0
    if collective == "all_reduce":
        return 2 * (n - 1) / n
    if collective in ("all_gather", "reduce_scatter", "all_to_all"):
        return (n - 1) / n
    return 1.0


def bandwidth_gbps(collective: str, nbytes: int, seconds: float, n: int
                   ) -> tuple[float | None, float | None]:
    """(algbw, busbw) in GB/s (1e9 bytes/s) of one collective; None without a time."""
    if seconds <= 0 or nbytes <= 0:
        return None, None
    alg = nbytes / seconds / 1e9
    return alg, alg * busbw_factor(collective, n)


_ELEMENT_BYTES = {
    "float": 4, "float32": 4, "int": 4, "int32": 4, "double": 8, "float64": 8, "long": 8,
    "int64": 8, "half": 2, "float16": 2, "bfloat16": 2, "c10::half": 2,
    "c10::bfloat16": 2, "short": 2, "int16": 2, "char": 1, "byte": 1, "bool": 1,
    "unsigned char": 1, "signed char": 1, "int8": 1, "uint8": 1,
    "c10::float8_e4m3fn": 1, "c10::float8_e5m2": 1,
}


def element_bytes(dtype: Any) -> int | None:
    return _ELEMENT_BYTES.get(str(dtype).strip().lower())


@dataclass(frozen=True)
class Collective:
    """One collective as one rank saw it."""

    group: str
    seq: int  # the profiler's sequence number, else the order in the window (per group)
    name: str  # normalised (normalise_collective)
    bytes: int | None  # message size (module docstring); None: not recorded
    start_us: float
    dur_us: float
    step: int = -1  # the profiled step (ProfilerStep#) that launched it; -1: not known

    @property
    def end_us(self) -> float:
        return self.start_us + self.dur_us


@dataclass
class RankTrace:
    """What one rank's profiled window says about communication."""

    rank: int
    steps: int  # calls of the workload inside the window
    window_us: float
    collectives: list[Collective] = field(default_factory=list)
    compute: list[Interval] = field(default_factory=list)  # union: non-communication work
    source: str = "cpu"  # "cuda": kernels of this device; "cpu": threads (docstring)
    notes: list[str] = field(default_factory=list)
    # CPU: the step's thread inside a collective op (c10d::*): blocked on communication
    blocked: list[Interval] = field(default_factory=list)
    # DDP's bucket copies (BUCKET_COPY_RANGES): the kernels and memcpys launched inside
    # them (CUDA), the ranges themselves (CPU). Memory work: also inside `compute`.
    bucket_copy: list[Interval] = field(default_factory=list)
    # CUDA: the host's own time in the window, the steps' thread's span of its step
    # ranges less its calls that wait for the device (tracefile.columns.BLOCKING_CALLS):
    # with the device's work, this rank's pace (accounting.trace_paces); None: not read
    host_us: float | None = None

    @property
    def bucket_copy_us(self) -> float:
        return total_us(self.bucket_copy)

    @property
    def comm_intervals(self) -> list[Interval]:
        return [(c.start_us, c.end_us) for c in self.collectives] + list(self.blocked)

    @property
    def comm_us(self) -> float:
        return total_us(self.comm_intervals)

    @property
    def exposed_us(self) -> float:
        return exposed_us(self.comm_intervals, self.compute)

    @property
    def exposed_fraction(self) -> float:
        return self.exposed_us / self.window_us if self.window_us > 0 else 0.0

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["collectives"] = [asdict(c) for c in self.collectives]
        return d

    @staticmethod
    def from_dict(d: dict[str, Any]) -> RankTrace:
        return RankTrace(d["rank"], d["steps"], d["window_us"],
                         [Collective(**c) for c in d["collectives"]],
                         [tuple(i) for i in d["compute"]],  # type: ignore[misc]
                         d["source"], list(d.get("notes", [])),
                         [tuple(i) for i in d.get("blocked", [])],  # type: ignore[misc]
                         [tuple(i) for i in d.get("bucket_copy", [])],  # type: ignore[misc]
                         d.get("host_us"))


@dataclass(frozen=True)
class Matched:
    """One collective matched across ranks by (group, seq)."""

    group: str
    seq: int
    name: str
    bytes: int | None
    dur_us: dict[int, float]  # rank -> its duration
    transfer_us: float  # the shortest duration: the late rank's, no waiting in it
    late_rank: int  # the rank that arrived last (shortest duration)
    algbw_gbps: float | None
    busbw_gbps: float | None
    pct_of_ceiling: float | None  # busbw / the measured ceiling (when one is given)

    def waiting_us(self, rank: int) -> float:
        return self.dur_us[rank] - self.transfer_us

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["dur_us"] = {str(k): v for k, v in self.dur_us.items()}
        d["waiting_us"] = {str(r): self.waiting_us(r) for r in self.dur_us}
        return d


def match_collectives(traces: Sequence[RankTrace],
                      ceilings_busbw_gbps: dict[str, float] | None = None
                      ) -> tuple[list[Matched], list[str]]:
    """Each collective seen on every rank, with its transfer time, the late rank, and
    its achieved bandwidth; notes for collectives missing on some rank."""
    n = len(traces)
    seen: dict[tuple[str, int], dict[int, Collective]] = {}
    for t in traces:
        for c in t.collectives:
            seen.setdefault((c.group, c.seq), {})[t.rank] = c
    notes: list[str] = []
    out: list[Matched] = []
    partial = 0
    for (group, seq), per in sorted(seen.items()):
        if len(per) < n:
            partial += 1
            continue
        first = next(iter(per.values()))
        durs = {r: c.dur_us for r, c in sorted(per.items())}
        late = min(durs, key=lambda r: durs[r])
        transfer = durs[late]
        alg, bus = bandwidth_gbps(first.name, first.bytes or 0, transfer * 1e-6, n)
        ceil = (ceilings_busbw_gbps or {}).get(first.name)
        pct = bus / ceil if bus is not None and ceil else None
        out.append(Matched(group, seq, first.name, first.bytes, durs, transfer, late,
                           alg, bus, pct))
    if partial:
        notes.append(f"{partial} collective(s) were not seen on every rank inside the "
                     "profiled window: left out of transfer/waiting")
    return out, notes


def exposed_split_us(trace: RankTrace, matched: Sequence[Matched]) -> tuple[float, float]:
    """(exposed transfer, exposed waiting) of one rank: each collective's first
    `waiting_us(rank)` microseconds are waiting, the rest transfer; each part minus the
    rank's compute. Collectives matched on fewer ranks count as transfer."""
    waits = {(m.group, m.seq): m.waiting_us(trace.rank) for m in matched
             if trace.rank in m.dur_us}
    wait_iv: list[Interval] = []
    xfer_iv: list[Interval] = []
    for c in trace.collectives:
        w = min(c.dur_us, max(0.0, waits.get((c.group, c.seq), 0.0)))
        wait_iv.append((c.start_us, c.start_us + w))
        xfer_iv.append((c.start_us + w, c.end_us))
    # where a waiting part of one collective overlaps a transfer part of another, the
    # time is transfer (data moved then): waiting excludes it
    waiting_only = exposed_us(subtract_list(wait_iv, xfer_iv), trace.compute)
    transfer = exposed_us(xfer_iv, trace.compute)
    return transfer, waiting_only


def least_step_waiting_us(trace: RankTrace, matched: Sequence[Matched]) -> float | None:
    """The least exposed waiting of one profiled step, over the steps whose collectives
    are known (their `step`); None where fewer than two steps are. A rank that waits for
    a late peer waits in every step; the profiler's uneven host cost moves the waiting
    from rank to rank and step to step (two H200s, ResNet-50 under DDP: rank 1 waited
    0, 18.2 and 30.8 ms in its three profiled steps, rank 0 12.9, 0 and 0, where the
    unprofiled steps of the two were 0.2 ms apart)."""
    steps = sorted({c.step for c in trace.collectives if c.step >= 0})
    if len(steps) < 2:
        return None
    return min(exposed_split_us(replace(trace, collectives=[
        c for c in trace.collectives if c.step == k]), matched)[1] for k in steps)
