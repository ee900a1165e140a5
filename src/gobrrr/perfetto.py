"""A Chrome/Perfetto trace (JSON trace-event format) of the profiled run, with gobrrr's
annotations on every op and kernel: regime, FLOPs, bytes, % of its own roofline, module,
phase; and the device's idle gaps as their own track. Open it in ui.perfetto.dev or
chrome://tracing.

- CUDA: the kernels of the profiled run at their device times (from the torch profiler
  kept in `ProfiledRun.raw`), each op spanning its kernels; idle = gaps between one
  kernel's end and the next kernel's start.
- CPU: there is no device timeline (each op was timed alone by replaying it, trace.py),
  so the ops are laid end to end in call order with their measured times, and the rest
  of the wall time (Python, dispatch) is one span at the end. The trace says so in its
  metadata (`otherData.timeline`).

Format: the Trace Event Format's JSON object form ("traceEvents" + "otherData";
complete events `ph: "X"` with `ts`/`dur` in microseconds, metadata events `ph: "M"`).
"""

from __future__ import annotations

import json
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gobrrr.errors import UserError

if TYPE_CHECKING:
    from gobrrr.counting import OpRecord
    from gobrrr.hardware import Ceilings
    from gobrrr.report import Report
    from gobrrr.trace import ProfiledRun

__all__ = ["OpNote", "op_notes", "trace_dict", "write_trace", "kernel_starts_us",
           "TID_KERNELS", "TID_OPS", "TID_IDLE"]

PID = 1
TID_KERNELS, TID_OPS, TID_IDLE = 1, 2, 3


@dataclass
class OpNote:
    """gobrrr's reading of one op call (one counted record)."""

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
    roofline_fraction: float | None

    def args(self) -> dict[str, Any]:
        return {"gobrrr.op_index": self.index, "op": self.op, "module": self.module,
                "phase": self.phase, "op_class": self.op_class, "regime": self.regime,
                "flops": self.flops, "bytes": self.bytes,
                "roofline_floor_us": round(self.floor_s * 1e6, 4),
                "roofline_pct": (round(100 * self.roofline_fraction, 1)
                                 if self.roofline_fraction is not None else None)}


def _time_scale(run: ProfiledRun, wall_s: float) -> float:
    # The same scaling budget.compute_budget applies when the profiled op times add up
    # to more than the unprofiled wall time: the trace must show the budget's numbers.
    return wall_s / run.busy_s if run.busy_s > wall_s > 0 else 1.0


def _regime(rec: OpRecord, ceil: Ceilings) -> tuple[str, float]:
    from gobrrr.budget import peak_for

    t_compute = rec.flops / peak_for(rec, ceil) if rec.flops else 0.0
    t_memory = rec.bytes / ceil.bandwidth_bytes_per_s if rec.bytes else 0.0
    if rec.flops == 0 and rec.bytes == 0:
        return "overhead", 0.0
    return ("compute" if t_compute >= t_memory else "memory"), max(t_compute, t_memory)


def op_notes(run: ProfiledRun, ceil: Ceilings, wall_s: float) -> dict[int, OpNote]:
    """Per record: its regime and roofline reading, by the rules of budget.py."""
    scale = _time_scale(run, wall_s)
    out = {}
    for rec in run.counts.records:
        regime, floor_s = _regime(rec, ceil)
        t_s = run.op_time_s.get(rec.index, 0.0) * scale
        frac = floor_s / t_s if t_s > 0 and floor_s > 0 else None
        out[rec.index] = OpNote(rec.index, rec.op, rec.module, rec.phase, rec.op_class,
                                regime, t_s, rec.flops, rec.bytes, floor_s, frac)
    return out


def kernel_starts_us(run: ProfiledRun) -> list[float | None]:
    """Start time (us, profiler clock) of each kernel in `run.kernels`, or None.

    trace.py keeps each kernel's name and duration as the launching op's profiler event
    lists them; the device-side events of the same profile carry the time ranges. Pair
    them by name and duration, in time order, among the device events of the counted
    call (the profiler's second call, inside trace.WINDOW)."""
    if any(k.start_us for k in run.kernels):
        return [k.start_us if k.start_us else None for k in run.kernels]
    raw = run.raw
    if raw is None:
        return [None] * len(run.kernels)
    from gobrrr.trace import WINDOW

    events = list(raw.events())
    # Only kernels of the counted (second) call: it runs inside the WINDOW range; the
    # profiler's CPU and device times share one clock.
    window = next((e for e in events if e.name == WINDOW), None)
    t_min = window.time_range.start if window is not None else float("-inf")
    by_name: dict[str, list[tuple[float, float]]] = defaultdict(list)
    for e in sorted((e for e in events if _is_device_event(e)),
                    key=lambda e: e.time_range.start):
        if e.time_range.start >= t_min:
            by_name[e.name].append((float(e.time_range.start),
                                    float(e.time_range.end - e.time_range.start)))
    starts: list[float | None] = []
    for k in run.kernels:
        cands = by_name.get(k.name)
        if not cands:
            starts.append(None)
            continue
        dur_us = k.duration_s * 1e6
        # The earliest unused event of this name whose duration matches (to 1 ns or
        # 0.1%); else the earliest unused one of this name.
        pick = next((i for i, (_s, d) in enumerate(cands)
                     if abs(d - dur_us) <= max(1e-3, 1e-3 * dur_us)), 0)
        starts.append(cands.pop(pick)[0])
    return starts


def _is_device_event(e: Any) -> bool:
    dt = getattr(e, "device_type", None)
    return getattr(dt, "name", str(dt)).upper().endswith("CUDA") and \
        getattr(e, "time_range", None) is not None


def _meta(name: str, tid: int | None, value: str | int, key: str = "name") -> dict[str, Any]:
    ev: dict[str, Any] = {"ph": "M", "pid": PID, "name": name, "args": {key: value}}
    if tid is not None:
        ev["tid"] = tid
    return ev


def _x(name: str, tid: int, ts_us: float, dur_us: float, args: dict[str, Any],
       cat: str) -> dict[str, Any]:
    return {"ph": "X", "pid": PID, "tid": tid, "name": name, "cat": cat,
            "ts": round(ts_us, 3), "dur": round(max(0.0, dur_us), 3), "args": args}


def _cuda_events(run: ProfiledRun, notes: dict[int, OpNote]) -> tuple[list[dict], dict]:
    starts = kernel_starts_us(run)
    placed: list[tuple[float, float, Any]] = []  # (start, duration, kernel), us
    unplaced = 0
    cursor = 0.0
    known = [s for s in starts if s is not None]
    t0 = min(known) if known else 0.0
    for k, s in zip(run.kernels, starts, strict=True):
        dur = k.duration_s * 1e6
        if s is None:  # no device time found: put it after the last one, and count it
            unplaced += 1
            s = cursor + t0
        placed.append((s - t0, dur, k))
        cursor = max(cursor, s - t0 + dur)
    placed.sort(key=lambda p: p[0])
    events: list[dict] = []
    spans: dict[int, list[float]] = {}
    for start, dur, k in placed:
        note = notes.get(k.record_index) if k.record_index is not None else None
        args = {"kernel": k.name}
        args.update(note.args() if note else {"op": None, "regime": "memory",
                                             "note": "outside any counted op"})
        events.append(_x(k.name, TID_KERNELS, start, dur, args, "kernel"))
        if k.record_index is not None:
            span = spans.setdefault(k.record_index, [start, start + dur])
            span[0], span[1] = min(span[0], start), max(span[1], start + dur)
    for idx, (a, b) in sorted(spans.items(), key=lambda kv: kv[1][0]):
        note = notes[idx]
        events.append(_x(note.op, TID_OPS, a, b - a, note.args(), f"op,{note.regime}"))
    idle_us = 0.0
    end = None
    for start, dur, _k in placed:
        if end is not None and start > end:
            gap = start - end
            idle_us += gap
            events.append(_x("idle", TID_IDLE, end, gap, {"gap_us": round(gap, 3)},
                             "idle"))
        end = start + dur if end is None else max(end, start + dur)
    span_us = end if end is not None else 0.0
    meta = {"timeline": "device: kernel start times and durations from the torch profiler",
            "kernels": len(placed), "kernels_without_start_time": unplaced,
            "idle_between_kernels_us": round(idle_us, 3),
            "first_to_last_kernel_us": round(span_us, 3)}
    return events, meta


def _cpu_events(run: ProfiledRun, notes: dict[int, OpNote], wall_s: float,
                ) -> tuple[list[dict], dict]:
    events: list[dict] = []
    t_us = 0.0
    for rec in run.counts.records:
        note = notes[rec.index]
        if note.time_s <= 0:
            continue  # views and bookkeeping: no execution time to draw
        dur = note.time_s * 1e6
        events.append(_x(note.op, TID_OPS, t_us, dur, note.args(), f"op,{note.regime}"))
        t_us += dur
    rest_us = max(0.0, wall_s * 1e6 - t_us)
    if rest_us > 0:
        events.append(_x("not in any op: Python, dispatch", TID_IDLE, t_us, rest_us,
                         {"us": round(rest_us, 3)}, "idle"))
    meta = {"timeline": "synthesized: CPU ops laid end to end in call order with the "
                        "time each took when replayed alone; the rest of the wall time "
                        "is one span at the end. Positions are not measured.",
            "ops_us": round(t_us, 3), "not_in_any_op_us": round(rest_us, 3)}
    return events, meta


def trace_dict(report: Report) -> dict[str, Any]:
    """The trace as a JSON-ready dict."""
    run = report.run
    if run is None:
        raise UserError("this report has no profiled run (was it loaded from JSON?); "
                        "--trace needs a live `gobrrr doctor` or `gobrrr.diagnose` run")
    wall_s = report.budget.wall_s
    notes = op_notes(run, report.ceilings, wall_s)
    if run.device == "cuda":
        events, meta = _cuda_events(run, notes)
    else:
        events, meta = _cpu_events(run, notes, wall_s)
    w = report.workload
    tracks = ({TID_KERNELS: "GPU kernels", TID_OPS: "ops (gobrrr: regime, FLOPs, bytes)",
               TID_IDLE: "GPU idle (gaps between kernels)"} if run.device == "cuda" else
              {TID_OPS: "CPU ops (synthesized timeline)",
               TID_IDLE: "overhead (not in any op)"})
    header = [_meta("process_name", None, f"gobrrr: {w['name']} on {run.device}")]
    header += [_meta("thread_name", tid, name) for tid, name in tracks.items()]
    header += [_meta("thread_sort_index", tid, tid, "sort_index") for tid in tracks]
    fp = report.ceilings.fingerprint
    other = {"gobrrr.workload": w["name"], "gobrrr.device": run.device,
             "gobrrr.machine": fp.get("name", run.device), "gobrrr.torch": fp.get("torch"),
             "gobrrr.regime": report.regime, "gobrrr.wall_us": round(wall_s * 1e6, 3),
             "gobrrr.created": report.created}
    other.update({f"gobrrr.{k}": v for k, v in meta.items()})
    return {"traceEvents": header + events, "displayTimeUnit": "ns", "otherData": other}


def write_trace(report: Report, path: str | Path) -> Path:
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(json.dumps(trace_dict(report), default=str), encoding="utf-8")
    return p
