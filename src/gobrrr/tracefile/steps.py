"""A trace's profiled steps as one averaged step: the counted ops, their device time, the
step's wall time and busy time, ready for budget.compute_budget.

- Counted ops ("records"): the ops a dispatch mode would see, as `gobrrr doctor` counts
  them: on each thread, the outermost op events that autograd does not decompose
  (tracecount.decomposes). Ops recorded inside a counted op (aten::relu's aten::clamp_min,
  aten::addmm's copies on CPU) are its implementation, and their kernels are its kernels.
  Autograd nodes and record_function ranges are looked through; the nearest
  record_function range names the op's module (optimizer steps as "optimizer.Adam"),
  autograd's engine marks the backward phase. An optimizer step that runs a closure
  (Lightning's automatic optimization: forward and backward inside `optimizer.step()`)
  holds the closure's ops too: inside a step range with backward ops in it (on any
  thread: CUDA's backward runs on the engine's device threads), the ops before the last
  backward op ends are the closure's forward, the ones after it the optimizer's.
- Kernels are joined to the op that launched them by External id, else through their
  launch call's correlation id (its External id, or the counted op around it on its
  thread).
- Steps are the `ProfilerStep#N` ranges, else those stepfind.py finds (a user's
  repeated record_function range, a repeated sequence of top-level calls, or one step
  without the profiler's start-up). A step's span runs from its first recorded event (op,
  range or launch call) to the end of its last event or of the last kernel it launched:
  the moments at a step's edges with no event at all are `prof.step()`'s own bookkeeping,
  not the user's (found steps, back to back, keep the time between them: the user's
  loop). Found steps on a GPU are counted from the completion of the call before them
  (and the first from the end of the device work launched before it, a warm-up call's
  say): while kernels queue up, a call's time is when its last kernel ends minus when
  the previous call's did. T_wall per step is the length of the union of the spans over
  the number of steps; for three or more found steps the median of their spans, as
  doctor takes the median of its calls (never below the mean busy time). Busy time is
  the time inside the spans when the GPU ran at least one kernel (the union of kernel
  intervals, so overlapping streams count once). GPU idle inside the spans is
  overhead; its share is an upper bound: the profiler's own host time per recorded
  event, which the trace cannot separate from the program's, leaves the GPU idle where
  the unprofiled program may not.
- Per-step averages: the k-th call of an op with the same name and shape signature lines
  up across steps (tracestream's signature leaves float scalars out); its time is the mean
  over all steps, and an op found in only some steps carries that share of its FLOPs and
  bytes. The kernel rows are one step's kernels with their mean durations, positioned as
  in the last step that ran them.
- A trace with no device activity is analysed on its CPU side: each counted op's busy
  time is its recorded duration (the op and what it calls inside).
"""

from __future__ import annotations

import bisect
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from gobrrr.counting import CountResult, OpRecord
from gobrrr.intervals import busy_us, union
from gobrrr.phases import (
    AUTOGRAD_RANGE,
    BACKWARD,
    FORWARD,
    OPTIMIZER,
    OPTIMIZER_STEP_RANGE,
    range_label,
)
from gobrrr.profile import is_compute_kernel
from gobrrr.recorded import is_inductor_kernel
from gobrrr.run import Kernel, ProfiledRun
from gobrrr.tracefile.columns import ANNOTATION, RecordedArgs, TraceColumns
from gobrrr.tracefile.flow import ShapeFlow
from gobrrr.tracefile.opcount import (
    OpCount,
    count_recorded,
    decomposes,
    is_op_name,
    output_of,
    tensor_inputs,
)
from gobrrr.tracefile.stepfind import find_steps

__all__ = ["TraceRun", "analyse_steps", "MEDIAN_STEPS"]

MEDIAN_STEPS = 3  # found steps from which T_wall is their median (fewer: the mean)



@dataclass
class TraceRun:
    """The averaged step of a trace: what compute_budget needs, and what was seen."""

    run: ProfiledRun
    wall_s: float  # T_wall per step (mean)
    samples_s: list[float]  # each step's span, in step order
    steps: int
    step_names: list[str]
    device: str  # "cuda" | "cpu"
    kernels_per_step: float = 0.0
    busy_s: float = 0.0  # per step, union of kernel (or CPU op) intervals in the spans
    notes: list[str] = field(default_factory=list)
    # What the trace left out or could not say (health.py's check)
    outside_ops: int = 0  # op calls outside the steps
    outside_kernels: int = 0  # kernels that ran outside the steps
    outside_kernel_s: float = 0.0  # and their summed time
    unlinked_kernels: float = 0.0  # per step: kernels in the steps linked to no counted op
    unshaped: list[int] = field(default_factory=list)  # records with no recorded shapes
    unbuilt: list[int] = field(default_factory=list)  # shapes that could not rebuild the op


@dataclass
class _Key:
    """One op call of the averaged step: the k-th call of (name, signature) in a step."""

    index: int
    name_id: int
    sig: int
    module: str
    phase: str
    present: int = 0  # steps in which it ran
    time_us: float = 0.0  # summed over steps
    kernel_names: set[int] = field(default_factory=set)
    kernels: dict[tuple[int, int], list[float]] = field(default_factory=dict)
    # (j-th kernel of the call, name id) -> [summed us, start us in its step's span, step]


def _counted_ops(cols: TraceColumns) -> tuple[np.ndarray, list[tuple[int, str, str]]]:
    """(for every CPU event, the counted op it belongs to or -1; the counted ops as
    (event index, module, phase) in start order)."""
    cpu = cols.cpu
    order = np.lexsort((-cpu["dur_us"], cpu["ts_us"], cpu["thread"]))
    ts, dur = cpu["ts_us"][order].tolist(), cpu["dur_us"][order].tolist()
    thread, name = cpu["thread"][order].tolist(), cpu["name"][order].tolist()
    sig, kind = cpu["sig"][order].tolist(), cpu["kind"][order].tolist()
    owner = np.full(len(order), -1, dtype=np.int64)
    counted: list[tuple[int, str, str]] = []
    decided: dict[tuple[int, int], bool] = {}
    names = cols.names
    # Stack of enclosing events: (end us, counted op index or -1, module, phase).
    stack: list[tuple[float, int, str, str]] = []
    step_ranges: list[tuple[float, float]] = []  # optimizer step ranges: (start, end) us
    last_thread = -1
    for i in range(len(order)):
        t = ts[i]
        if thread[i] != last_thread:
            stack.clear()
            last_thread = thread[i]
        while stack and t >= stack[-1][0]:
            stack.pop()
        root, module, phase = stack[-1][1:] if stack else (-1, "Global", FORWARD)
        n, s = name[i], sig[i]
        # (an Inductor kernel's range may be written as a user annotation: an op all
        # the same, the only one compiled code has around its launch)
        if root < 0 and (kind[i] != ANNOTATION or is_inductor_kernel(names[n])):
            key = (n, s)
            is_op = decided.get(key)
            if is_op is None:
                nm = names[n]
                is_op = decided[key] = is_op_name(nm) and not decomposes(
                    nm, cols.sigs[s] if s >= 0 else None)
            if is_op:
                root = int(order[i])
                counted.append((root, module, phase))
        if root >= 0:
            owner[order[i]] = root
        elif kind[i] == ANNOTATION or names[n].startswith(AUTOGRAD_RANGE):
            # record_function ranges name what runs inside them; autograd's engine marks
            # the backward pass (the node events inside it are looked through).
            module, phase = range_label(names[n], module, phase)
            if names[n].startswith(OPTIMIZER_STEP_RANGE):
                step_ranges.append((t, t + dur[i]))
        stack.append((t + dur[i], root, module, phase))
    counted.sort(key=lambda c: float(cpu["ts_us"][c[0]]))
    return owner, _closures_apart(counted, step_ranges, cpu["ts_us"], cpu["dur_us"])


def _closures_apart(counted: list[tuple[int, str, str]],
                    step_ranges: list[tuple[float, float]], ts_us: np.ndarray,
                    dur_us: np.ndarray) -> list[tuple[int, str, str]]:
    """The closure's forward ops inside optimizer step ranges (module docstring)."""
    if not step_ranges or not any(c[2] == BACKWARD for c in counted):
        return counted
    bw = [(float(ts_us[c[0]]), float(ts_us[c[0]] + dur_us[c[0]])) for c in counted
          if c[2] == BACKWARD]
    bw_starts = [b[0] for b in bw]
    starts = [float(ts_us[c[0]]) for c in counted]  # counted is in start order
    out = list(counted)
    for t0, t1 in step_ranges:
        lo, hi = bisect.bisect_left(bw_starts, t0), bisect.bisect_right(bw_starts, t1)
        if lo == hi:
            continue  # no closure's backward in this step: all of it is the optimizer's
        closure_end = max(end for _, end in bw[lo:hi])
        for k in range(bisect.bisect_left(starts, t0), bisect.bisect_left(starts,
                                                                           closure_end)):
            idx, module, phase = out[k]
            if phase == OPTIMIZER:
                out[k] = (idx, "Global" if module.startswith("optimizer.") else module,
                          FORWARD)
    return out


def _launching_event(cols: TraceColumns, owner: np.ndarray) -> np.ndarray:
    """For every device activity, the CPU event that launched it (-1: none found)."""
    cpu, dev, launch = cols.cpu, cols.device, cols.launch
    out = np.full(len(dev["ts_us"]), -1, dtype=np.int64)
    with_ext = np.flatnonzero(cpu["ext"] >= 0)
    by_ext = with_ext[np.argsort(cpu["ext"][with_ext], kind="stable")]
    sorted_ext = cpu["ext"][by_ext]

    def find(ext: np.ndarray) -> np.ndarray:
        pos = np.searchsorted(sorted_ext, ext)
        pos = np.minimum(pos, max(len(sorted_ext) - 1, 0))
        hit = (len(sorted_ext) > 0) & (ext >= 0)
        hit &= sorted_ext[pos] == ext if len(sorted_ext) else False
        return np.where(hit, by_ext[pos] if len(by_ext) else -1, -1)

    out[:] = find(dev["ext"])
    missing = np.flatnonzero((out < 0) & (dev["corr"] >= 0))
    if len(missing) and len(launch["corr"]):
        # Through the launch call: its External id, else the counted op around it.
        lorder = np.argsort(launch["corr"], kind="stable")
        lcorr = launch["corr"][lorder]
        pos = np.minimum(np.searchsorted(lcorr, dev["corr"][missing]), len(lcorr) - 1)
        ok = lcorr[pos] == dev["corr"][missing]
        li = np.where(ok, lorder[pos], -1)
        via_ext = find(np.where(li >= 0, launch["ext"][np.maximum(li, 0)], -1))
        out[missing] = via_ext
        around = _op_around(cols, owner)
        for m, lx in zip(missing[via_ext < 0].tolist(), li[via_ext < 0].tolist(),
                         strict=True):
            if lx >= 0:
                out[m] = around(int(launch["thread"][lx]), float(launch["ts_us"][lx]))
    return out


def _op_around(cols: TraceColumns, owner: np.ndarray) -> Callable[[int, float], int]:
    """(thread, time) -> the counted op running there, or -1."""
    roots = np.unique(owner[owner >= 0])
    per_thread: dict[int, tuple[list[float], list[int]]] = {}
    for r in roots[np.argsort(cols.cpu["ts_us"][roots])].tolist():
        starts, idx = per_thread.setdefault(int(cols.cpu["thread"][r]), ([], []))
        starts.append(float(cols.cpu["ts_us"][r]))
        idx.append(r)

    def around(thread: int, t: float) -> int:
        starts, idx = per_thread.get(thread, ([], []))
        k = bisect.bisect_right(starts, t) - 1
        if k >= 0 and t <= starts[k] + float(cols.cpu["dur_us"][idx[k]]):
            return idx[k]
        return -1

    return around


def _lead_us(cols: TraceColumns, launched_by: np.ndarray, first_us: float,
             d_end: np.ndarray) -> float:
    """When the device work launched before the first step (a warm-up call stepfind.py
    left out, the profiler's start-up) ended: by its launching event's time, else by
    its own start; -inf if there is none."""
    launch_us = np.where(launched_by >= 0, cols.cpu["ts_us"][np.maximum(launched_by, 0)],
                         cols.device["ts_us"])
    before = launch_us < first_us
    return float(d_end[before].max()) if before.any() else -np.inf


def _after_completion(span_lo: np.ndarray, span_hi: np.ndarray, lead_us: float) -> None:
    """Found steps, back to back, each counted from the completion of the one before it
    (in place): a call completes when both its host window and the kernels it launched
    have ended, and the GPU runs a stream's kernels in launch order, so while kernels
    queue up (the device slower than the host) call k's time is C_k - C_(k-1), as
    doctor's back-to-back calls see it. The first step starts when the work launched
    before it (`lead_us`) is done: on the H200 compiled ResNet-50's first call, left
    out as a warm-up by its 9.9 ms host window, still had 16 ms of kernels queued, which
    ran inside the later steps' spans and read as their busy time (19.1 ms per step
    against 16.0 ms of kernels per call; memory 0.65 against doctor's 0.48). Several
    streams may overlap the calls: then this is approximate (never before a step's first
    event, never past its end)."""
    prev = lead_us
    for k in range(len(span_lo)):
        span_lo[k] = min(max(span_lo[k], prev), span_hi[k])
        prev = span_hi[k]


# how the note on a median T_wall begins (a T_wall given by the user drops it)
MEDIAN_WALL_NOTE = "T_wall per step is the median of the"


def _median_step_us(times_us: np.ndarray, busy_us_per_step: float, notes: list[str]
                    ) -> float:
    """T_wall of found steps (back to back, each counted from the one before it): the
    median of the calls' times, as doctor's timer takes the median of its calls, never
    below the mean busy time. The profiler slows calls unevenly (on the H200 the GPT-2
    training step's last call took 69.4 ms against 48.5-51.2 ms for the three before it,
    its backward 41 ms against 24-30 ms; a compiled call's second run 0.27 ms against
    0.12 ms), and one such call would move a mean."""
    median_us = float(np.median(times_us))
    mean_us = float(times_us.mean())
    step_us = max(median_us, busy_us_per_step)
    if abs(step_us - mean_us) > 0.01 * mean_us:
        notes.append(f"{MEDIAN_WALL_NOTE} {len(times_us)} calls' times "
                     f"({step_us / 1e3:.3f} ms; their mean {mean_us / 1e3:.3f} ms), as "
                     "doctor takes the median of its calls: the profiler slows calls "
                     "unevenly")
    return step_us


def analyse_steps(cols: TraceColumns,
                  count: Callable[[str, RecordedArgs | None], OpCount] = count_recorded,
                  empty_op_us: float = 0.0) -> TraceRun:
    """The averaged profiled step of a streamed trace (module docstring); `count` gives
    an op's FLOPs and bytes from its recorded arguments; `empty_op_us`: on a trace with
    no device activity, what each op event holds besides its work (cpu_dispatch.py),
    taken off its busy time."""
    cpu, dev, launch = cols.cpu, cols.device, cols.launch
    names = cols.names
    notes: list[str] = []
    if cols.step_rule is None:
        cols = find_steps(cols)
    owner, counted = _counted_ops(cols)
    gpu = cols.has_device_activity
    # Steps: ProfilerStep# ranges, or found (stepfind.py).
    rule = cols.step_rule
    assert rule is not None and cols.steps
    step_ts = np.array([s[1] for s in cols.steps])
    step_end = step_ts + np.array([s[2] for s in cols.steps])
    step_names = [rule.name(s[0], i) for i, s in enumerate(cols.steps)]
    marked = rule.kind == "profiler"
    if not marked:
        notes.append(rule.note)
    n_steps = len(step_ts)

    def step_of(t: np.ndarray) -> np.ndarray:
        k = np.searchsorted(step_ts, t, side="right") - 1
        kk = np.maximum(k, 0)
        return np.where((k >= 0) & (t <= step_end[kk]), k, -1)

    # Spans: first to last recorded event of each step, then its kernels' ends.
    ev_ts = np.concatenate((cpu["ts_us"], launch["ts_us"]))
    ev_end = ev_ts + np.concatenate((cpu["dur_us"], launch["dur_us"]))
    ev_step = step_of(ev_ts)
    in_step = ev_step >= 0
    span_lo = step_end.copy()
    span_hi = step_ts.copy()
    np.minimum.at(span_lo, ev_step[in_step], ev_ts[in_step])
    np.maximum.at(span_hi, ev_step[in_step],
                  np.minimum(ev_end[in_step], step_end[ev_step[in_step]]))
    empty = span_hi <= span_lo
    span_lo[empty], span_hi[empty] = step_ts[empty], step_end[empty]

    # Device activity: its launching event, its counted op, its step.
    launched_by = _launching_event(cols, owner) if gpu else np.zeros(0, dtype=np.int64)
    d_op = np.where(launched_by >= 0, owner[np.maximum(launched_by, 0)], -1)
    d_step = np.where(launched_by >= 0, step_of(cpu["ts_us"][np.maximum(launched_by, 0)]),
                      step_of(dev["ts_us"]))
    d_end = dev["ts_us"] + dev["dur_us"]
    if gpu:
        ok = d_step >= 0
        np.maximum.at(span_hi, d_step[ok], d_end[ok])
    if not marked and n_steps > 1:
        # Found steps are back to back (stepfind.py): the host time from one call's last
        # event to the next call's first is the user's loop, which doctor's back-to-back
        # calls hold too, not a profiler's bookkeeping.
        span_hi[:-1] = np.maximum(span_hi[:-1], step_ts[1:])
    if not marked and gpu:
        _after_completion(span_lo, span_hi, _lead_us(cols, launched_by, step_ts[0], d_end))
    # a zero-length span (a step of no duration) stays, as it always has: it covers nothing
    ws, we = union(span_lo, span_hi, keep_empty=True)
    wall_us = float((we - ws).sum())
    samples_s = ((span_hi - span_lo) * 1e-6).tolist()
    edges_us = float(((step_end - step_ts) - (np.minimum(span_hi, step_end) - span_lo))
                     .clip(min=0).mean()) if marked else 0.0

    # Counted ops in steps -> keys of the averaged step.
    op_step = step_of(cpu["ts_us"][[c[0] for c in counted]]) if counted else np.zeros(0, int)
    keys: list[_Key] = []
    key_of_event: dict[int, int] = {}
    by_sig: dict[tuple[int, int, int], int] = {}
    seen: dict[tuple[int, int], int] = {}
    last_step = -1
    for (ev, module, phase), st in zip(counted, op_step.tolist(), strict=True):
        if st < 0:
            continue
        if st != last_step:
            seen.clear()
            last_step = st
        n, s = int(cpu["name"][ev]), int(cpu["sig"][ev])
        k = seen.get((n, s), 0)
        seen[(n, s)] = k + 1
        ki = by_sig.get((n, s, k))
        if ki is None:
            ki = by_sig[(n, s, k)] = len(keys)
            keys.append(_Key(ki, n, s, module, phase))
        keys[ki].present += 1
        key_of_event[ev] = ki
    outside_ops = int((op_step < 0).sum())

    # Busy time and each key's time.
    unattributed: dict[int, list[float]] = {}
    outside_kernels, outside_us = 0, 0.0
    unlinked = 0  # device activities inside the steps linked to no counted op
    if gpu:
        d_start = dev["ts_us"]
        busy_time_us, inside = busy_us(d_start, dev["dur_us"], ws, we)
        # j: the kernel's rank among those its op call launched, in start order.
        order = np.lexsort((d_start, d_op))
        j_prev, op_prev = 0, -2
        summed_us = 0.0
        dur_l, op_l, step_l = dev["dur_us"].tolist(), d_op.tolist(), d_step.tolist()
        start_l, name_l, inside_l = d_start.tolist(), dev["name"].tolist(), inside.tolist()
        for i in order.tolist():
            op, st = op_l[i], step_l[i]
            j_prev = j_prev + 1 if op == op_prev else 0
            op_prev = op
            ki = key_of_event.get(op, -1) if op >= 0 and st >= 0 else -1
            if ki >= 0:
                key = keys[ki]
                key.time_us += dur_l[i]
                key.kernel_names.add(name_l[i])
                slot = key.kernels.setdefault((j_prev, name_l[i]), [0.0, 0.0, -1.0])
                slot[0] += dur_l[i]
                if st > slot[2]:  # positioned as in the last step that ran it
                    slot[1], slot[2] = start_l[i] - float(span_lo[st]), st
                summed_us += dur_l[i]
            elif inside_l[i] > 0:
                # Not launched by a counted op of a step (or not linked), but the GPU ran
                # it inside a step's span: device time all the same.
                slot = unattributed.setdefault(name_l[i], [0.0, 0.0, -1.0])
                slot[0] += inside_l[i]
                unlinked += 1
                w = max(0, int(np.searchsorted(span_lo, start_l[i], side="right")) - 1)
                slot[1], slot[2] = start_l[i] - float(span_lo[w]), w
                summed_us += inside_l[i]
            else:
                outside_kernels += 1
                outside_us += dur_l[i]
        kernels_counted = int(((d_op >= 0) & (d_step >= 0)).sum())
        kernels_per_step = kernels_counted / n_steps
    else:
        # CPU side: each counted op's busy time is its duration inside the spans.
        evs = np.array(list(key_of_event), dtype=np.int64)
        o_start = cpu["ts_us"][evs] if len(evs) else np.zeros(0)
        o_dur = cpu["dur_us"][evs] if len(evs) else np.zeros(0)
        if empty_op_us > 0:
            o_dur = np.maximum(o_dur - empty_op_us, 0.0)  # dispatch: overhead, not work
        busy_time_us, inside = busy_us(o_start, o_dur, ws, we)
        for ev, us in zip(evs.tolist(), inside.tolist(), strict=True):
            keys[key_of_event[ev]].time_us += us
        summed_us = float(inside.sum())
        kernels_per_step = 0.0
    # Overlap (several streams or threads) counts once: scale the summed op times to it.
    scale = (busy_time_us / summed_us
             if summed_us > busy_time_us * (1 + 1e-9) and busy_time_us > 0 else 1.0)
    if scale < 0.999:
        notes.append(f"{'kernels' if gpu else 'ops'} overlapped (several "
                     f"{'streams' if gpu else 'threads'}): their summed time "
                     f"{summed_us / n_steps:.1f} us per step was scaled to the "
                     f"{busy_time_us / n_steps:.1f} us the {'GPU' if gpu else 'CPU'} was "
                     "busy")

    step_us = wall_us / n_steps
    if not marked and n_steps >= MEDIAN_STEPS:
        step_us = _median_step_us(span_hi - span_lo, busy_time_us / n_steps, notes)

    # Records and the run.
    counts: dict[tuple[int, int], OpCount] = {}
    records: list[OpRecord] = []
    run = ProfiledRun(counts=CountResult(records), device="cuda" if gpu else "cpu",
                      op_time_s={})
    per = scale * 1e-6 / n_steps
    flow = ShapeFlow()  # keys are in call order: the first step's, then calls new after it
    for key in keys:
        nm = names[key.name_id]
        args = cols.sigs[key.sig] if key.sig >= 0 else None
        c = counts.get((key.name_id, key.sig))
        if c is None:
            c = counts[(key.name_id, key.sig)] = count(nm, args)
        reads, writes = flow.op(c.op_class, tensor_inputs(args), output_of(c))
        share = key.present / n_steps
        unit = c.tensor_core_unit
        if unit == "fp32" and gpu and any("tf32" in names[k].lower()
                                          for k in key.kernel_names):
            unit = "tf32"  # fp32 matmuls ran on TF32 tensor cores (the kernel says so)
        hint = c.regime_hint
        if hint == "memory" and any(is_compute_kernel(names[k]) for k in key.kernel_names):
            hint = "compute"
        records.append(OpRecord(
            index=key.index, op=nm, module=key.module, phase=key.phase,
            op_class=c.op_class, dtype=c.dtype, flops=round(c.flops * share),
            bytes=round(c.bytes * share), tensor_core_unit=unit,
            has_formula=c.has_formula, regime_hint=hint, reads=reads, writes=writes))
        run.op_time_s[key.index] = key.time_us * per
        for (_j, kname), (us, start, _st) in sorted(key.kernels.items(),
                                                    key=lambda kv: kv[1][1]):
            run.kernels.append(Kernel(names[kname], us * per, key.index, start))
    for kname, (us, start, _st) in unattributed.items():
        run.kernels.append(Kernel(names[kname], us * per, None, start))
        run.unattributed_s += us * per
    run.kernels.sort(key=lambda k: k.start_us if k.start_us is not None else 0.0)
    run.busy_s = busy_time_us * 1e-6 / n_steps

    if marked:
        notes.insert(0, f"{n_steps} profiled step(s) ({step_names[0]} to {step_names[-1]}): "
                        "times are per-step averages. A step's span runs from its first "
                        "recorded event to its last event or kernel; "
                        f"{edges_us:.1f} us per step at the edges with no event "
                        "(prof.step()'s own bookkeeping) are left out")
    if outside_ops:
        notes.append(f"{outside_ops} op call(s) outside the profiled steps: not counted")
    if outside_kernels:
        notes.append(f"{outside_kernels} kernel(s) ({outside_us:.1f} us) ran outside the "
                     "profiled steps: not counted")
    devices = sorted(set(dev["device"].tolist()) - {-1}) if gpu else []
    if len(devices) > 1:
        notes.append(f"kernels ran on devices {devices}: analysed together, as one GPU")
    unbuilt = [k for k in keys if counts[(k.name_id, k.sig)].method == "shapes"]
    for hinted, how in ((False, "bytes of their recorded inputs only, no FLOPs"),
                        (True, "their arguments give no size (a tensor list recorded without "
                               "shapes): no FLOPs or bytes, their time goes to memory, or to "
                               "compute if they are GEMM-like, with no roofline")):
        some = [names[k.name_id] for k in unbuilt
                if (counts[(k.name_id, k.sig)].regime_hint is not None) == hinted]
        if some:
            shown = ", ".join(sorted(set(some))[:6]) + (", ..." if len(set(some)) > 6 else "")
            notes.append(f"{len(some)} op call(s) could not be rebuilt from their recorded "
                         f"shapes ({shown}): {how}")
    if keys and all(k.sig < 0 for k in keys):
        notes.append("the trace has no recorded shapes (record_shapes=False): no FLOPs or "
                     "bytes; each op's time goes to compute if it is a matmul, conv or "
                     "attention (by op or kernel name), else to memory, with no roofline")
    return TraceRun(run=run, wall_s=step_us * 1e-6, samples_s=samples_s,
                    steps=n_steps, step_names=step_names, device=run.device,
                    kernels_per_step=kernels_per_step, busy_s=run.busy_s, notes=notes,
                    outside_ops=outside_ops, outside_kernels=outside_kernels,
                    outside_kernel_s=outside_us * 1e-6, unlinked_kernels=unlinked / n_steps,
                    unshaped=[k.index for k in keys if k.sig < 0],
                    unbuilt=[k.index for k in unbuilt if k.sig >= 0])
