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
- Ops below their roof. The FLOP term of element-wise math (counting.py credits a softmax
  5 FLOPs per element, at the fp32 FMA peak) cannot see what it costs in instructions
  (hardware.py's docstring). So an op of a calibrated kind (counting.math_elements: softmax,
  exp-like) also gets a *math floor*: elements / the calibrated rate of its kind and dtype.
  An op the roofline calls memory-bound whose math floor explains its time (at least
  INSTRUCTION_EXPLAINS_FRACTION of it) while its bytes do not (its bandwidth floor under
  LOW_ROOF_FRACTION of its time) is compute-bound, limit "instruction": non-tensor-core
  math bound by instruction throughput, with the arithmetic as its reason. Its roofline
  fraction stays the roofline's (floor / time), so it can also be flagged.
- Rows: per op, module, op class and phase (phases.py), each rolled up from the calls
  the same way, so a training step's forward, backward and optimizer (a generation's
  prefill and decode) read apart; a single-call workload is one phase.
- Flags: under BELOW_ROOF_FRACTION of the roofline "<25%", from there to
  LOW_ROOF_FRACTION "25-50%"; each flagged op or row carries the likely cause the data
  supports (`likely_cause`), else "unknown". One rule (`classify`) for doctor and analyze.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, replace
from typing import Any

from gobrrr.counting import MATMUL_CLASSES, OpRecord, math_elements
from gobrrr.hardware import Ceilings
from gobrrr.profile import is_compute_kernel, is_math_kernel, split_kernel_time
from gobrrr.run import ProfiledRun
from gobrrr.units import fmt_num, fmt_pct, fmt_s

__all__ = ["RowBudget", "CallRow", "KernelRow", "Budget", "compute_budget", "peak_for",
           "BELOW_ROOF_FRACTION", "LOW_ROOF_FRACTION", "INSTRUCTION_EXPLAINS_FRACTION",
           "REGIMES", "LIMITS", "OpBound",
           "classify", "math_floor", "roof_band", "likely_cause", "with_communication",
           "with_data_loading", "COMMUNICATION"]

# Ops achieving less than this fraction of their own roofline are flagged "<25%".
BELOW_ROOF_FRACTION = 0.25
# ... and from there to this fraction "25-50%" (the issue's softmax ran at 30% of roof).
LOW_ROOF_FRACTION = 0.5
# An op whose calibrated math floor is at least this share of its time, its bandwidth
# floor under LOW_ROOF_FRACTION of it, is instruction-bound. Not 1.0: the calibrated
# rate is the probe's shape (rows of 4096) and the op's rows differ; 0.6 leaves 40% for
# that, and with the bandwidth floor under 0.5 the math floor must exceed the bytes floor
# by 1.2x at least, so a probe that met the bandwidth itself (math floor ~ bytes floor,
# hardware.py) never makes an op instruction-bound.
INSTRUCTION_EXPLAINS_FRACTION = 0.6
# Causes (likely_cause): auxiliary kernels that take this share of a matmul's time; a
# kernel (CUDA) or op call (CPU) shorter than this many times the measured cost of one
# tiny op is small: fixed per-kernel costs, not its bytes or math, set its time.
AUX_CAUSE_FRACTION = 0.25
SMALL_KERNEL_FACTOR = 2.0
REGIMES = ("overhead", "memory", "compute")
COMMUNICATION = "communication"  # the fourth part, distributed reports only
# What limits an op's time, by the rule that gave its regime: "flops" (FLOP term of the
# roofline), "bytes" (bandwidth term), "instruction" (calibrated element-wise math),
# "hint" (no shapes: what the op is), "none" (moves nothing: overhead).
LIMITS = ("flops", "bytes", "instruction", "hint", "none")


@dataclass(frozen=True)
class OpBound:
    """The budget rule's answer for one op call (`classify`)."""

    regime: str
    limit: str
    floor_s: float  # the roofline floor: max(flops / peak, bytes / bandwidth)
    bytes_floor_s: float  # bytes / bandwidth
    math_floor_s: float  # elements / calibrated rate of its kind; 0: none applies
    reason: str | None  # for limit "instruction": the arithmetic


def math_floor(rec: OpRecord, ceil: Ceilings) -> tuple[float, str | None, str | None]:
    """(math floor in seconds, the arithmetic's first half, why none) of one op:
    elements / the calibrated rate of its kind and dtype (counting.math_elements). 0 when
    the op is of no calibrated kind, or (with the why) when its dtype was not calibrated."""
    found = math_elements(rec.op, rec.flops)
    if found is None:
        return 0.0, None, None
    kind, elems = found
    rate = ceil.math_elems_per_s(kind, rec.dtype)
    if rate is None:
        return 0.0, None, f"{kind} {rec.dtype}"
    floor_s = elems / rate
    return floor_s, (f"{kind} {rec.dtype}: {fmt_num(elems)} elem at "
                     f"{fmt_num(rate, 'elem/s')} calibrated = {fmt_s(floor_s)}"), None


def classify(rec: OpRecord, time_s: float, ceil: Ceilings) -> OpBound:
    """The regime of one op call's time (module docstring): the roofline's larger term,
    or, for an op the roofline calls memory-bound, instruction-bound compute when its
    calibrated math explains its time and its bytes do not."""
    t_compute = rec.flops / peak_for(rec, ceil) if rec.flops else 0.0
    t_memory = rec.bytes / ceil.bandwidth_bytes_per_s if rec.bytes else 0.0
    floor_s = max(t_compute, t_memory)
    hint = rec.regime_hint  # flops and bytes unknown: what the op is decides
    if (hint is None and rec.flops == 0 and rec.bytes == 0) or hint == "overhead":
        return OpBound("overhead", "none" if hint is None else "hint", floor_s, t_memory,
                       0.0, None)
    if hint is not None:
        return OpBound("compute" if hint == "compute" else "memory", "hint", floor_s,
                       t_memory, 0.0, None)
    if t_compute >= t_memory:
        return OpBound("compute", "flops", floor_s, t_memory, 0.0, None)
    math_s, arithmetic, _ = math_floor(rec, ceil)
    if (time_s > 0 and math_s >= INSTRUCTION_EXPLAINS_FRACTION * time_s
            and t_memory < LOW_ROOF_FRACTION * time_s):
        reason = (f"{arithmetic} of {fmt_s(time_s)}; bytes alone need {fmt_s(t_memory)} "
                  f"({fmt_pct(t_memory / time_s)} of its time at the "
                  f"{ceil.roof_kind} bandwidth)")
        return OpBound("compute", "instruction", floor_s, t_memory, math_s, reason)
    return OpBound("memory", "bytes", floor_s, t_memory, math_s, None)


def roof_band(fraction: float | None) -> str | None:
    """"<25%" under BELOW_ROOF_FRACTION of the roofline, "25-50%" under
    LOW_ROOF_FRACTION, else None (also when there is no roofline: no FLOPs and bytes)."""
    if fraction is None:
        return None
    if fraction < BELOW_ROOF_FRACTION:
        return "<25%"
    return "25-50%" if fraction < LOW_ROOF_FRACTION else None


def likely_cause(*, time_s: float, floor_s: float, math_floor_s: float, limit: str,
                 aux_s: float, n_kernels: int, calls: int, ceil: Ceilings) -> str:
    """Why an op (or a row of ops) runs below its roofline, from what the budget knows:
    its calibrated math, its auxiliary kernels, its kernels' size, the roofs' source;
    "unknown" when none of them explains it. Strides are not recorded: an uncoalesced
    or non-contiguous layout is never claimed."""
    if limit == "instruction" and time_s > 0:
        return (f"instruction-bound element-wise math: its calibrated math floor is "
                f"{fmt_pct(math_floor_s / time_s)} of its time (the reason says how)")
    if math_floor_s > floor_s and time_s > 0:
        return (f"element-wise math: its calibrated floor {fmt_s(math_floor_s)} is "
                f"{fmt_pct(math_floor_s / time_s)} of its time, above its roofline floor "
                f"{fmt_s(floor_s)}")
    if time_s > 0 and aux_s >= AUX_CAUSE_FRACTION * time_s:
        return (f"non-GEMM kernels (layout transposes, split-K reductions) take "
                f"{fmt_pct(aux_s / time_s)} of its time")
    units = n_kernels or calls
    each_s = time_s / units if units else 0.0
    if ceil.op_overhead_s > 0 and 0 < each_s < SMALL_KERNEL_FACTOR * ceil.op_overhead_s:
        what = "kernel" if n_kernels else "op call"
        return (f"small {what}s: {fmt_s(each_s)} each, under {SMALL_KERNEL_FACTOR:g}x the "
                f"{fmt_s(ceil.op_overhead_s)} one tiny op costs here: fixed per-{what} "
                "costs (launch, ramp-up, tail), not bytes or math, set its time")
    if ceil.source == "datasheet":
        return ("roofs from the datasheet, above what kernels reach: its fraction reads "
                "low")
    return "unknown"


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
    limit: str = "none"  # LIMITS: what the rule found limits its time
    math_floor_s: float = 0.0  # calibrated element-wise math floor (0: none applies)
    reason: str | None = None  # limit "instruction": the arithmetic
    cause: str | None = None  # flagged (roof_band): the likely cause, or "unknown"

    @property
    def roofline_fraction(self) -> float | None:
        return self.floor_s / self.time_s if self.time_s > 0 and self.floor_s > 0 else None

    @property
    def roof_band(self) -> str | None:
        return roof_band(self.roofline_fraction)

    def to_dict(self) -> dict[str, Any]:
        # The optional fields (schema 1.5) only where they say something: a generation's
        # report has thousands of rows, most of them views and copies with none of them.
        row = asdict(self) | {"roofline_fraction": self.roofline_fraction,
                              "roof_band": self.roof_band}
        return {k: v for k, v in row.items()
                if k not in _OPTIONAL_CALL_FIELDS or v not in (None, "none", 0.0)}


KERNEL_NAME_CHARS = 160  # a kernel's name in the report, at most
# CallRow's fields that a report leaves out when they hold nothing (None, "none", 0)
_OPTIONAL_CALL_FIELDS = ("limit", "math_floor_s", "reason", "cause", "roof_band")


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
    phase: str | None = None  # the phase of the op that launched it (None: outside any)

    def to_dict(self) -> dict[str, Any]:
        # C++ template names run to 700 characters; 160 keep every distinct kernel of a
        # TinyLlama generation distinct and take 1.4 MB of its report down to 0.5 MB.
        name = (self.name if len(self.name) <= KERNEL_NAME_CHARS
                else self.name[:KERNEL_NAME_CHARS - 3] + "...")
        return asdict(self) | {"name": name}


@dataclass
class RowBudget:
    """One op name, module, op class or phase, rolled up over its calls."""

    name: str
    calls: int = 0
    time_s: float = 0.0
    flops: int = 0
    bytes: int = 0
    floor_s: float = 0.0
    compute_s: float = 0.0
    memory_s: float = 0.0
    overhead_s: float = 0.0
    instruction_s: float = 0.0  # of compute_s: calls whose limit is "instruction"
    math_floor_s: float = 0.0  # summed calibrated math floors of its calls
    # The reason of its longest instruction-bound call; the likely cause when flagged.
    reason: str | None = None
    cause: str | None = None

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
            roof_band=self.roof_band,
            limit=self.limit,
        )
        return d

    @property
    def below_roof(self) -> bool:
        return self.roof_band == "<25%"

    @property
    def roof_band(self) -> str | None:
        return roof_band(self.roofline_fraction)

    @property
    def limit(self) -> str:
        """"instruction" when most of its compute time is instruction-bound, else what
        its bound regime means: "flops" (compute), "bytes" (memory), "none"."""
        if self.bound == "compute":
            return "instruction" if 2 * self.instruction_s >= self.compute_s else "flops"
        return "bytes" if self.bound == "memory" else "none"


@dataclass
class Budget:
    wall_s: float
    busy_s: float  # device (kernel) time or CPU op execution time, after any scaling
    overhead_s: float
    memory_s: float
    compute_s: float
    floor_s: float  # roofline floor: sum over ops of max(flops/peak, bytes/bandwidth)
    below_roof_s: float  # busy time of ops under BELOW_ROOF_FRACTION of their roofline
    low_roof_s: float = 0.0  # ... from BELOW_ROOF_FRACTION to under LOW_ROOF_FRACTION
    per_op: list[RowBudget] = field(default_factory=list)
    per_module: list[RowBudget] = field(default_factory=list)
    per_class: list[RowBudget] = field(default_factory=list)
    # by phase (phases.py: forward, backward, optimizer, ..., or a record_function name):
    # a step of several regimes read apart
    per_phase: list[RowBudget] = field(default_factory=list)
    # compute-bound time by the unit that did it (bf16 fp16 tf32 fp32, "vector" for
    # non-matmul math by its FLOPs, "instruction" for element-wise math bound by
    # instruction throughput): what a tensor-core remedy can speed up
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
    # of overhead_s: the wait for the next batch with the device idle (run.DataLoading's
    # exposed_s), measured, not estimated; None: no DataLoader was seen. Not a part of
    # its own: the device idles as it does for any host time (the essay's overhead)
    data_loading_s: float | None = None
    # CUDA: the host's own time to issue one call, measured with the GPU held busy
    # (timing.host_issue): a floor under the time after a remedy that leaves the host's
    # work (gobrrr.gains); None where not measured (CPU, traces, a call that waits)
    host_issue_s: float | None = None
    # CUDA: the workload's largest fp32 GEMM shapes timed in fp32, TF32 and bf16
    # (gemm_probe.GemmTimes): the precision remedies read their ratios (precision.py)
    gemm_times: list[Any] = field(default_factory=list)

    @property
    def regimes(self) -> tuple[str, ...]:
        return REGIMES if self.communication_s is None else (*REGIMES, COMMUNICATION)

    @property
    def total_s(self) -> float:
        return (self.overhead_s + self.memory_s + self.compute_s
                + (self.communication_s or 0.0))

    @property
    def parts_s(self) -> dict[str, float]:
        """Seconds per part, in REGIMES order (communication last, distributed only): the
        numbers every renderer shows; they sum to total_s."""
        out = {"overhead": self.overhead_s, "memory": self.memory_s,
               "compute": self.compute_s}
        if self.communication_s is not None:
            out[COMMUNICATION] = self.communication_s
        return out

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
            "low_roof_s": self.low_roof_s, "low_roof_threshold": LOW_ROOF_FRACTION,
            "total_s": self.total_s, "parts_s": self.parts_s,
            "fractions": self.fractions, "regime": self.regime,
            "per_op": [r.to_dict() for r in self.per_op],
            "per_module": [r.to_dict() for r in self.per_module],
            "per_class": [r.to_dict() for r in self.per_class],
            "per_phase": [r.to_dict() for r in self.per_phase],
            "compute_s_by_unit": self.compute_s_by_unit,
            "unmeasured_ops": self.unmeasured_ops,
            "per_call": [r.to_dict() for r in self.per_call],
            "kernels": [k.to_dict() for k in self.kernels],
            "notes": self.notes,
        } | ({} if self.communication_s is None else
             {"communication_s": self.communication_s}) | (
            {} if self.data_loading_s is None else {"data_loading_s": self.data_loading_s}) | (
            {} if self.host_issue_s is None else {"host_issue_s": self.host_issue_s}) | (
            {"gemm_times": [g.to_dict() for g in self.gemm_times]} if self.gemm_times
            else {})


def peak_for(rec: OpRecord, ceil: Ceilings) -> float:
    """The compute roof of one op: its tensor-core unit's measured matmul rate for
    matmul-class ops, the fp32 non-tensor-core rate for everything else."""
    if rec.op_class in MATMUL_CLASSES and rec.tensor_core_unit in ceil.peak_flops_per_s:
        return ceil.peak_flops_per_s[rec.tensor_core_unit]
    return ceil.vector_flops_per_s()


@dataclass
class _Extra:
    """What a row's likely cause needs beyond its RowBudget fields."""

    aux_s: float = 0.0
    n_kernels: int = 0
    longest: CallRow | None = None  # its longest instruction-bound call


def _rollup(rows: dict[str, RowBudget], extra: dict[str, _Extra], key: str,
            call: CallRow, c: float, m: float, o: float, aux_s: float,
            n_kernels: int) -> None:
    row = rows.setdefault(key, RowBudget(key))
    row.calls += 1
    row.time_s += call.time_s
    row.flops += call.flops
    row.bytes += call.bytes
    row.floor_s += call.floor_s
    row.compute_s += c
    row.memory_s += m
    row.overhead_s += o
    row.math_floor_s += call.math_floor_s
    x = extra.setdefault(key, _Extra())
    x.aux_s += aux_s
    x.n_kernels += n_kernels
    if call.limit == "instruction":
        row.instruction_s += c
        if x.longest is None or call.time_s > x.longest.time_s:
            x.longest = call


def _finish_rows(rows: dict[str, RowBudget], extra: dict[str, _Extra],
                 ceil: Ceilings) -> list[RowBudget]:
    """The rows by time, each with the reason of its longest instruction-bound call and,
    when flagged, its likely cause (from the row's own sums)."""
    for key, row in rows.items():
        x = extra[key]
        if x.longest is not None and x.longest.reason:
            row.reason = (x.longest.reason if row.calls == 1 else
                          f"longest of {row.calls} calls: {x.longest.reason}")
        if row.roof_band is not None:
            row.cause = likely_cause(
                time_s=row.time_s, floor_s=row.floor_s, math_floor_s=row.math_floor_s,
                limit=row.limit, aux_s=x.aux_s,
                n_kernels=x.n_kernels, calls=row.calls, ceil=ceil)
    return sorted(rows.values(), key=lambda r: -r.time_s)


# compute_s_by_unit's key for math kernels linked to no op (by name): no FLOPs, no peak
UNLINKED_UNIT = "unlinked"


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
    per_phase: dict[str, RowBudget] = {}
    extra: tuple[dict[str, _Extra], ...] = ({}, {}, {}, {})
    compute_s = memory_s = view_s = floor_total = below_s = low_s = 0.0
    by_unit: dict[str, float] = {}
    calls: list[CallRow] = []
    unchecked: dict[str, float] = {}  # "kind dtype" with no calibrated rate -> time
    for rec in records:
        main_s, aux_s = split_kernel_time(run, rec.index, rec.op_class)
        main_s *= scale
        aux_s *= scale
        t_s = main_s + aux_s
        ob = classify(rec, t_s, ceil)
        c = m = o = 0.0
        if ob.regime == "overhead":
            o = t_s  # views and bookkeeping: pure overhead
        elif ob.regime == "compute":
            # a matmul's auxiliary kernels (transposes, split-K reductions) move bytes
            c, m = (t_s, 0.0) if ob.limit == "instruction" else (main_s, aux_s)
        else:
            m = t_s
        if ob.limit == "bytes" and t_s > 0:
            _, _, missing = math_floor(rec, ceil)
            if missing is not None:
                unchecked[missing] = unchecked.get(missing, 0.0) + t_s
        n_kernels = len(run.kernels_of(rec.index)) if run.device == "cuda" else 0
        call = CallRow(rec.index, rec.op, rec.module, rec.phase, rec.op_class, ob.regime,
                       t_s, rec.flops, rec.bytes, ob.floor_s, ob.limit, ob.math_floor_s,
                       ob.reason)
        if call.roof_band is not None:
            call = replace(call, cause=likely_cause(
                time_s=t_s, floor_s=ob.floor_s, math_floor_s=ob.math_floor_s,
                limit=ob.limit, aux_s=aux_s, n_kernels=n_kernels,
                calls=1, ceil=ceil))
        calls.append(call)
        compute_s += c
        if c > 0:
            unit = ("instruction" if ob.limit == "instruction" else
                    rec.tensor_core_unit if rec.op_class in MATMUL_CLASSES else "vector")
            by_unit[unit or "vector"] = by_unit.get(unit or "vector", 0.0) + c
        memory_s += m
        view_s += o
        floor_total += ob.floor_s
        if call.roof_band == "<25%":
            below_s += t_s
        elif call.roof_band == "25-50%":
            low_s += t_s
        for rows, x, key in ((per_op, extra[0], rec.op), (per_module, extra[1], rec.module),
                             (per_class, extra[2], rec.op_class),
                             (per_phase, extra[3], rec.phase)):
            _rollup(rows, x, key, call, c, m, o, aux_s, n_kernels)
    if unchecked:
        what = ", ".join(f"{k} ({fmt_s(v)})" for k, v in sorted(unchecked.items()))
        notes.append(f"no calibrated element-wise rate for {what} in these ceilings "
                     f"({ceil.source}): those ops were not checked for an instruction bound")
    unattributed = run.unattributed_s * scale
    if unattributed > 0:
        # Kernels outside any counted op (accumulate-grad, copies; a CUDA graph's replayed
        # kernels in a recorded trace): no FLOP/byte count, so no roofline; they are
        # device time all the same. A math kernel by its name (GEMM, convolution,
        # attention; not a GEMV) is counted as compute, the rest as memory, and the note
        # says so.
        math_s = scale * sum(k.duration_s for k in run.kernels
                             if k.record_index is None and is_compute_kernel(k.name))
        compute_s += math_s
        if math_s > 0:
            by_unit[UNLINKED_UNIT] = math_s
        memory_s += unattributed - math_s
        split = (f"{math_s * 1e6:.1f} us of them GEMM, convolution or attention kernels by "
                 "their names, counted as compute-bound, the rest (GEMVs included) as "
                 "memory-bound"
                 if math_s > 0 else "counted as memory-bound")
        notes.append(f"{unattributed * 1e6:.1f} us of kernels ran outside any counted op "
                     f"(no FLOPs or bytes, no roofline): {split}")
    if run.unreplayable:
        names = sorted(set(run.unreplayable))
        first = next(iter(run.replay_errors.items()), None)
        why = f"; {first[0]} raised {first[1]}" if first else ""
        notes.append(f"{len(run.unreplayable)} op call(s) could not be replayed alone "
                     f"({', '.join(names[:5])}): their time is unmeasured and sits in "
                     f"overhead, which is then an upper bound{why}")
    busy_s = compute_s + memory_s + view_s
    overhead_s = max(0.0, wall_s - busy_s) + view_s
    return Budget(
        wall_s=wall_s, busy_s=busy_s, overhead_s=overhead_s, memory_s=memory_s,
        compute_s=compute_s, floor_s=floor_total, below_roof_s=below_s, low_roof_s=low_s,
        per_op=_finish_rows(per_op, extra[0], ceil),
        per_module=_finish_rows(per_module, extra[1], ceil),
        per_class=_finish_rows(per_class, extra[2], ceil),
        per_phase=_finish_rows(per_phase, extra[3], ceil),
        compute_s_by_unit=by_unit,
        per_call=calls,
        kernels=_kernel_rows(run, {c.index: c for c in calls}),
        unmeasured_ops=sorted(set(run.unreplayable)),
        notes=notes,
    )


def _fit_busy(b: Budget, kept_s: float, what: str) -> tuple[float, float, float, list[str]]:
    """(compute, memory, view) seconds scaled down so that busy + `kept_s` (a measured
    part of the overhead: exposed communication, the wait for data) fit T_wall, and the
    notes: the op times come from other steps (replayed or profiled), the kept part and
    T_wall from the same timed steps, so the op times give way."""
    view_s = max(0.0, b.busy_s - b.compute_s - b.memory_s)
    notes = list(b.notes)
    compute_s, memory_s = b.compute_s, b.memory_s
    room = b.wall_s - kept_s
    if room <= 0:
        return 0.0, 0.0, 0.0, notes
    if b.busy_s > room and b.busy_s > 0:
        k = room / b.busy_s
        compute_s, memory_s, view_s = compute_s * k, memory_s * k, view_s * k
        notes.append(f"op times plus {what} summed to {(b.busy_s + kept_s) / b.wall_s:.2f}x "
                     "the wall time; compute and memory scaled down to fit")
    return compute_s, memory_s, view_s, notes


def with_communication(b: Budget, communication_s: float) -> Budget:
    """The budget with exposed communication as its fourth part: it comes out of what
    the three-part budget called overhead (T_wall - busy, the device idle), since a rank
    that waits on a collective runs no op. When busy + communication exceed T_wall (two
    runs: the replayed or profiled ops and the profiled steps), compute and memory are
    scaled down to fit and the note says so; per-op rows keep their measured times."""
    comm = max(0.0, min(communication_s, b.wall_s))
    compute_s, memory_s, view_s, notes = _fit_busy(b, comm, "exposed communication")
    busy = compute_s + memory_s + view_s
    overhead_s = max(0.0, b.wall_s - busy - comm) + view_s
    return replace(b, busy_s=busy, compute_s=compute_s, memory_s=memory_s,
                   overhead_s=overhead_s, communication_s=comm, notes=notes)


def with_data_loading(b: Budget, exposed_s: float) -> Budget:
    """The budget with the measured wait for data named inside its overhead (the device
    idles as it does for any host time: no part of its own). The wait and T_wall come
    from the same timed steps, the op times from others: where busy + wait exceed
    T_wall, compute and memory are scaled down to fit (as with_communication does), and
    the note says so; per-op rows keep their measured times."""
    comm = b.communication_s or 0.0
    loading = max(0.0, min(exposed_s, b.wall_s - comm))
    compute_s, memory_s, view_s, notes = _fit_busy(b, loading + comm, "the wait for data")
    busy = compute_s + memory_s + view_s
    overhead_s = max(0.0, b.wall_s - busy - comm) + view_s
    return replace(b, busy_s=busy, compute_s=compute_s, memory_s=memory_s,
                   overhead_s=overhead_s, data_loading_s=loading, notes=notes)


def _kernel_rows(run: ProfiledRun, calls: dict[int, CallRow]) -> list[KernelRow]:
    """Each kernel with the regime `compute_budget` gave its time (see KernelRow)."""
    known = [k.start_us for k in run.kernels if k.start_us is not None]
    t0 = min(known) if known else 0.0
    rows = []
    for k in run.kernels:
        call = calls.get(k.record_index) if k.record_index is not None else None
        regime = "memory" if call is None else call.regime
        if call is not None and regime == "compute" and call.op_class in MATMUL_CLASSES \
                and call.limit != "instruction":
            # split_kernel_time: GEMM kernels are the op's math, the rest moves bytes;
            # an op none of whose kernels has a GEMM name keeps its time whole.
            mains = [x for x in run.kernels_of(call.index) if is_math_kernel(x.name)]
            if mains and not is_math_kernel(k.name):
                regime = "memory"
        rows.append(KernelRow(k.name, k.record_index,
                              None if k.start_us is None else k.start_us - t0,
                              k.duration_s, regime, None if call is None else call.phase))
    rows.sort(key=lambda r: (r.start_us is None, r.start_us or 0.0))
    return rows
