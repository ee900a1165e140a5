"""The time budget: T_wall = overhead + memory-bound time + compute-bound time.

- T_wall: the honest timer's median per call (timing.py, never profiled).
- Busy time: CUDA kernel time from the profiled run (trace.py), or on CPU the summed
  execution time of the ops (range time minus the cost of an empty range).
- overhead = T_wall - busy: the device idle while Python and the framework dispatch
  (on CPU: everything that is not an op's execution), plus the time of ops that move no
  bytes and do no math (views, bookkeeping).
- Each op's busy time goes to compute or memory by which roofline term is larger:
  flops / peak(its unit) vs bytes / bandwidth (measured ceilings). Within a matmul-class
  op on CUDA, non-GEMM kernels (layout transposes, split-K reductions) go to memory.
- An op whose flops and bytes are unknown (a trace recorded without shapes) carries a
  regime hint instead (GEMM-like: compute, views: overhead, the rest: memory) and no
  roofline floor.
- Each op also gets its achieved fraction of its own roofline: floor / time, where
  floor = max(flops / peak, bytes / bandwidth). Ops under BELOW_ROOF_FRACTION are flagged:
  the three regimes say where time goes, the roofline fraction how well it is spent.
- Under torchrun (gobrrr.dist) a fourth part, communication: exposed collective time
  (nothing computes while it runs), from the profiled steps (dist/comm.py);
  `with_communication` returns the budget with it. Single-process budgets keep three.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from gobrrr.counting import MATMUL_CLASSES, OpRecord
from gobrrr.hardware import Ceilings
from gobrrr.trace import ProfiledRun, is_math_kernel, split_kernel_time

__all__ = ["RowBudget", "CallRow", "KernelRow", "Budget", "compute_budget", "peak_for",
           "BELOW_ROOF_FRACTION", "REGIMES", "FUSABLE_CLASSES", "fusable_bytes_saved",
           "with_communication", "COMMUNICATION"]

# Ops achieving less than this fraction of their own roofline are flagged "below roof".
BELOW_ROOF_FRACTION = 0.25
REGIMES = ("overhead", "memory", "compute")
COMMUNICATION = "communication"  # the fourth part, distributed reports only


@dataclass(frozen=True)
class CallRow:
    """One counted op call: its regime by the budget's rule and its share of time.
    `time_s` is the budget's (scaled to fit T_wall when the profiled run overran it)."""

    index: int
    op: str
    module: str
    phase: str
    op_class: str
    regime: str  # compute | memory | overhead (no FLOPs, no bytes)
    time_s: float
    flops: int
    bytes: int
    floor_s: float

    @property
    def roofline_fraction(self) -> float | None:
        return self.floor_s / self.time_s if self.time_s > 0 and self.floor_s > 0 else None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self) | {"roofline_fraction": self.roofline_fraction}


@dataclass(frozen=True)
class KernelRow:
    """One CUDA kernel of the profiled call, with the regime the budget gave its time:
    a matmul-class op's GEMM kernels are compute when the op is, its other kernels
    (layout transposes, split-K reductions) memory; kernels outside any op memory.
    `start_us` is relative to the first kernel (None: the profiler gave no start);
    `duration_s` is as the profiler measured it (not scaled)."""

    name: str
    op_index: int | None
    start_us: float | None
    duration_s: float
    regime: str

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class RowBudget:
    """One op name or one module, rolled up over its calls."""

    name: str
    calls: int = 0
    time_s: float = 0.0
    flops: int = 0
    bytes: int = 0
    floor_s: float = 0.0
    compute_s: float = 0.0
    memory_s: float = 0.0
    overhead_s: float = 0.0

    @property
    def intensity_flops_per_byte(self) -> float | None:
        return self.flops / self.bytes if self.bytes else None

    @property
    def achieved_flops_per_s(self) -> float | None:
        return self.flops / self.time_s if self.time_s > 0 else None

    @property
    def achieved_bytes_per_s(self) -> float | None:
        return self.bytes / self.time_s if self.time_s > 0 else None

    @property
    def roofline_fraction(self) -> float | None:
        return self.floor_s / self.time_s if self.time_s > 0 and self.floor_s > 0 else None

    @property
    def bound(self) -> str:
        parts = {"compute": self.compute_s, "memory": self.memory_s,
                 "overhead": self.overhead_s}
        return max(parts, key=lambda k: parts[k]) if self.time_s > 0 else "none"

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d.update(
            intensity_flops_per_byte=self.intensity_flops_per_byte,
            achieved_flops_per_s=self.achieved_flops_per_s,
            achieved_bytes_per_s=self.achieved_bytes_per_s,
            roofline_fraction=self.roofline_fraction,
            bound=self.bound,
            below_roof=self.below_roof,
        )
        return d

    @property
    def below_roof(self) -> bool:
        f = self.roofline_fraction
        return f is not None and f < BELOW_ROOF_FRACTION


@dataclass
class Budget:
    wall_s: float
    busy_s: float  # device (kernel) time or CPU op execution time, after any scaling
    overhead_s: float
    memory_s: float
    compute_s: float
    floor_s: float  # roofline floor: sum over ops of max(flops/peak, bytes/bandwidth)
    below_roof_s: float  # busy time of ops under BELOW_ROOF_FRACTION of their roofline
    per_op: list[RowBudget] = field(default_factory=list)
    per_module: list[RowBudget] = field(default_factory=list)
    per_class: list[RowBudget] = field(default_factory=list)
    # compute-bound time by the unit that did it (bf16 fp16 tf32 fp32, "vector" for
    # non-matmul math): what a tensor-core remedy can speed up
    compute_s_by_unit: dict[str, float] = field(default_factory=dict)
    per_call: list[CallRow] = field(default_factory=list)  # in call order
    kernels: list[KernelRow] = field(default_factory=list)  # CUDA: in start order
    # CPU ops that could not be replayed alone: their execution time was not measured,
    # so it sits inside overhead (T_wall - busy), which is then an upper bound.
    unmeasured_ops: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    # exposed communication per call (distributed runs only; None: a single process,
    # whose budget has exactly three parts)
    communication_s: float | None = None

    @property
    def regimes(self) -> tuple[str, ...]:
        return REGIMES if self.communication_s is None else (*REGIMES, COMMUNICATION)

    @property
    def total_s(self) -> float:
        return (self.overhead_s + self.memory_s + self.compute_s
                + (self.communication_s or 0.0))

    @property
    def fractions(self) -> dict[str, float]:
        total = self.total_s
        if total <= 0:
            return {r: 0.0 for r in self.regimes} | {"overhead": 1.0}
        out = {"overhead": self.overhead_s / total, "memory": self.memory_s / total,
               "compute": self.compute_s / total}
        if self.communication_s is not None:
            out[COMMUNICATION] = self.communication_s / total
        return out

    @property
    def regime(self) -> str:
        f = self.fractions
        return max(self.regimes, key=lambda r: f[r])

    def to_dict(self) -> dict[str, Any]:
        return {
            "wall_s": self.wall_s, "busy_s": self.busy_s, "overhead_s": self.overhead_s,
            "memory_s": self.memory_s, "compute_s": self.compute_s,
            "floor_s": self.floor_s, "below_roof_s": self.below_roof_s,
            "below_roof_threshold": BELOW_ROOF_FRACTION,
            "fractions": self.fractions, "regime": self.regime,
            "per_op": [r.to_dict() for r in self.per_op],
            "per_module": [r.to_dict() for r in self.per_module],
            "per_class": [r.to_dict() for r in self.per_class],
            "compute_s_by_unit": self.compute_s_by_unit,
            "unmeasured_ops": self.unmeasured_ops,
            "per_call": [r.to_dict() for r in self.per_call],
            "kernels": [k.to_dict() for k in self.kernels],
            "notes": self.notes,
        } | ({} if self.communication_s is None else
             {"communication_s": self.communication_s})


def peak_for(rec: OpRecord, ceil: Ceilings) -> float:
    """The compute roof of one op: its tensor-core unit's measured matmul rate for
    matmul-class ops, the fp32 non-tensor-core rate for everything else."""
    if rec.op_class in MATMUL_CLASSES and rec.tensor_core_unit in ceil.peak_flops_per_s:
        return ceil.peak_flops_per_s[rec.tensor_core_unit]
    return ceil.vector_flops_per_s()


def _rollup(rows: dict[str, RowBudget], key: str, rec: OpRecord, time_s: float,
            floor_s: float, compute_s: float, memory_s: float, overhead_s: float) -> None:
    row = rows.setdefault(key, RowBudget(key))
    row.calls += 1
    row.time_s += time_s
    row.flops += rec.flops
    row.bytes += rec.bytes
    row.floor_s += floor_s
    row.compute_s += compute_s
    row.memory_s += memory_s
    row.overhead_s += overhead_s


def compute_budget(run: ProfiledRun, wall_s: float, ceil: Ceilings) -> Budget:
    records = run.counts.records
    notes: list[str] = []
    busy_raw = run.busy_s
    # The profiled run's op times and the timer's wall time come from two runs. If the
    # ops alone took longer than the whole unprofiled call (noise, or on CPU a profiler
    # that slowed the ops themselves), scale op times down to fit and say so.
    scale = 1.0
    if busy_raw > wall_s > 0:
        scale = wall_s / busy_raw
        if scale < 0.9:
            notes.append(f"op times from the profiled run summed to {busy_raw / wall_s:.2f}x "
                         "the wall time; scaled down to fit (profiler inflation or noise)")
    per_op: dict[str, RowBudget] = {}
    per_module: dict[str, RowBudget] = {}
    per_class: dict[str, RowBudget] = {}
    compute_s = memory_s = view_s = floor_total = below_s = 0.0
    by_unit: dict[str, float] = {}
    calls: list[CallRow] = []
    for rec in records:
        main_s, aux_s = split_kernel_time(run, rec.index, rec.op_class)
        main_s *= scale
        aux_s *= scale
        t_s = main_s + aux_s
        t_compute = rec.flops / peak_for(rec, ceil) if rec.flops else 0.0
        t_memory = rec.bytes / ceil.bandwidth_bytes_per_s if rec.bytes else 0.0
        floor_s = max(t_compute, t_memory)
        c = m = o = 0.0
        hint = rec.regime_hint  # flops and bytes unknown: what the op is decides
        if (hint is None and rec.flops == 0 and rec.bytes == 0) or hint == "overhead":
            o = t_s  # views and bookkeeping: pure overhead
            regime = "overhead"
        elif hint == "compute" or (hint is None and t_compute >= t_memory):
            c, m = main_s, aux_s
            regime = "compute"
        else:
            m = t_s
            regime = "memory"
        calls.append(CallRow(rec.index, rec.op, rec.module, rec.phase, rec.op_class, regime,
                             t_s, rec.flops, rec.bytes, floor_s))
        compute_s += c
        if c > 0:
            unit = rec.tensor_core_unit if rec.op_class in MATMUL_CLASSES else "vector"
            by_unit[unit or "vector"] = by_unit.get(unit or "vector", 0.0) + c
        memory_s += m
        view_s += o
        floor_total += floor_s
        if t_s > 0 and floor_s > 0 and floor_s / t_s < BELOW_ROOF_FRACTION:
            below_s += t_s
        for rows, key in ((per_op, rec.op), (per_module, rec.module),
                          (per_class, rec.op_class)):
            _rollup(rows, key, rec, t_s, floor_s, c, m, o)
    unattributed = run.unattributed_s * scale
    if unattributed > 0:
        # Kernels outside any counted op: no FLOP/byte count, so no roofline; they are
        # device time all the same. Assign them to memory (most such kernels are
        # accumulate-grad / copies) and say so.
        memory_s += unattributed
        notes.append(f"{unattributed * 1e6:.1f} us of kernels ran outside any counted op; "
                     "counted as memory-bound")
    if run.unreplayable:
        names = sorted(set(run.unreplayable))
        first = next(iter(run.replay_errors.items()), None)
        why = f"; {first[0]} raised {first[1]}" if first else ""
        notes.append(f"{len(run.unreplayable)} op call(s) could not be replayed alone "
                     f"({', '.join(names[:5])}): their time is unmeasured and sits in "
                     f"overhead, which is then an upper bound{why}")
    busy_s = compute_s + memory_s + view_s
    overhead_s = max(0.0, wall_s - busy_s) + view_s
    order: Callable[[RowBudget], float] = lambda r: -r.time_s  # noqa: E731
    return Budget(
        wall_s=wall_s, busy_s=busy_s, overhead_s=overhead_s, memory_s=memory_s,
        compute_s=compute_s, floor_s=floor_total, below_roof_s=below_s,
        per_op=sorted(per_op.values(), key=order),
        per_module=sorted(per_module.values(), key=order),
        per_class=sorted(per_class.values(), key=order),
        compute_s_by_unit=by_unit,
        per_call=calls,
        kernels=_kernel_rows(run, {c.index: c for c in calls}),
        unmeasured_ops=sorted(set(run.unreplayable)),
        notes=notes,
    )


def with_communication(b: Budget, communication_s: float) -> Budget:
    """The budget with exposed communication as its fourth part: it comes out of what
    the three-part budget called overhead (T_wall - busy, the device idle), since a rank
    that waits on a collective runs no op. When busy + communication exceed T_wall (two
    runs: the replayed or profiled ops and the profiled steps), compute and memory are
    scaled down to fit and the note says so; per-op rows keep their measured times."""
    comm = max(0.0, min(communication_s, b.wall_s))
    view_s = max(0.0, b.busy_s - b.compute_s - b.memory_s)
    notes = list(b.notes)
    compute_s, memory_s = b.compute_s, b.memory_s
    room = b.wall_s - comm
    if b.busy_s > room > 0 and b.busy_s > 0:
        k = room / b.busy_s
        compute_s, memory_s, view_s = compute_s * k, memory_s * k, view_s * k
        notes.append(f"op times plus exposed communication summed to "
                     f"{(b.busy_s + comm) / b.wall_s:.2f}x the wall time; compute and memory "
                     "scaled down to fit")
    elif room <= 0:
        compute_s = memory_s = view_s = 0.0
    busy = compute_s + memory_s + view_s
    overhead_s = max(0.0, b.wall_s - busy - comm) + view_s
    return replace(b, busy_s=busy, compute_s=compute_s, memory_s=memory_s,
                   overhead_s=overhead_s, communication_s=comm, notes=notes)


def _kernel_rows(run: ProfiledRun, calls: dict[int, CallRow]) -> list[KernelRow]:
    """Each kernel with the regime `compute_budget` gave its time (see KernelRow)."""
    known = [k.start_us for k in run.kernels if k.start_us is not None]
    t0 = min(known) if known else 0.0
    rows = []
    for k in run.kernels:
        call = calls.get(k.record_index) if k.record_index is not None else None
        regime = "memory" if call is None else call.regime
        if call is not None and regime == "compute" and call.op_class in MATMUL_CLASSES:
            # split_kernel_time: GEMM kernels are the op's math, the rest moves bytes;
            # an op none of whose kernels has a GEMM name keeps its time whole.
            mains = [x for x in run.kernels_of(call.index) if is_math_kernel(x.name)]
            if mains and not is_math_kernel(k.name):
                regime = "memory"
        rows.append(KernelRow(k.name, k.record_index,
                              None if k.start_us is None else k.start_us - t0,
                              k.duration_s, regime))
    rows.sort(key=lambda r: (r.start_us is None, r.start_us or 0.0))
    return rows


# Ops whose intermediate results a fusing compiler can keep in registers.
FUSABLE_CLASSES = ("pointwise", "norm", "softmax", "reduction")


def fusable_bytes_saved(records: list[OpRecord]) -> tuple[int, int]:
    """(bytes a perfect fusion of pointwise/norm/softmax/reduction chains would save,
    bytes those ops move unfused). An intermediate written by a fusable op and read by a
    later fusable op need not round-trip through memory: its write and re-read (2x its
    bytes) disappear. Assumes every consumer fuses (an upper bound; the essay's
    `x.cos().cos()`: 4N -> 2N accesses)."""
    fusable = [r for r in records if r.op_class in FUSABLE_CLASSES]
    total = sum(r.bytes for r in fusable)
    produced: dict[int, int] = {}
    saved = 0
    for r in fusable:
        for ptr in r.reads:
            if ptr in produced:
                saved += 2 * produced.pop(ptr)
        for ptr, nbytes in r.writes:
            produced[ptr] = nbytes
    return min(saved, total), total
