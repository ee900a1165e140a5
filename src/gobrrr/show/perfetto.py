"""A Chrome/Perfetto trace (JSON trace-event format) of the profiled run, with gobrrr's
annotations on every op and kernel: regime, FLOPs, bytes, % of its own roofline, module,
phase (forward, backward, optimizer, ...); and the device's idle gaps as their own
track. Open it in ui.perfetto.dev or chrome://tracing.

Built from the report's dict alone (`Report.to_dict()` or a saved `--json`): the budget
already holds one row per op call (`budget.per_call`) and, on CUDA, one per kernel with
its start time and the regime the budget gave it (`budget.kernels`). Nothing here
re-derives a classification.

- CUDA: the kernels at their device times, each op spanning its kernels; idle = gaps
  between one kernel's end and the next kernel's start.
- CPU: there is no device timeline (each op was timed alone by replaying it, trace.py),
  so the ops are laid end to end in call order with their measured times, and the rest
  of the wall time (Python, dispatch) is one span at the end. The trace says so in its
  metadata (`otherData.timeline`).

Format: the Trace Event Format's JSON object form ("traceEvents" + "otherData";
complete events `ph: "X"` with `ts`/`dur` in microseconds, metadata events `ph: "M"`).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from gobrrr.errors import UserError

__all__ = ["trace_dict", "write_trace", "TID_KERNELS", "TID_OPS", "TID_IDLE"]

PID = 1
TID_KERNELS, TID_OPS, TID_IDLE = 1, 2, 3


def _call_args(row: dict[str, Any]) -> dict[str, Any]:
    frac = row["roofline_fraction"]
    return {"gobrrr.op_index": row["index"], "op": row["op"], "module": row["module"],
            "phase": row["phase"], "op_class": row["op_class"], "regime": row["regime"],
            "flops": row["flops"], "bytes": row["bytes"],
            "roofline_floor_us": round(row["floor_s"] * 1e6, 4),
            "roofline_pct": round(100 * frac, 1) if frac is not None else None,
            # report 1.4 (absent from older reports): what limits it, and why
            "limit": row.get("limit"), "why": row.get("reason") or row.get("cause")}


def _meta(name: str, tid: int | None, value: str | int, key: str = "name") -> dict[str, Any]:
    ev: dict[str, Any] = {"ph": "M", "pid": PID, "name": name, "args": {key: value}}
    if tid is not None:
        ev["tid"] = tid
    return ev


def _x(name: str, tid: int, ts_us: float, dur_us: float, args: dict[str, Any],
       cat: str) -> dict[str, Any]:
    return {"ph": "X", "pid": PID, "tid": tid, "name": name, "cat": cat,
            "ts": round(ts_us, 3), "dur": round(max(0.0, dur_us), 3), "args": args}


def _cuda_events(budget: dict[str, Any]) -> tuple[list[dict], dict]:
    calls = {row["index"]: row for row in budget["per_call"]}
    placed: list[tuple[float, float, dict[str, Any]]] = []  # (start, duration, kernel), us
    unplaced = 0
    cursor = 0.0
    for k in budget["kernels"]:  # start order; kernels without a start come last
        dur = k["duration_s"] * 1e6
        start = k["start_us"]
        if start is None:  # no device time: put it after the last one, and count it
            unplaced += 1
            start = cursor
        placed.append((start, dur, k))
        cursor = max(cursor, start + dur)
    events: list[dict] = []
    spans: dict[int, list[float]] = {}
    for start, dur, k in placed:
        call = calls.get(k["op_index"]) if k["op_index"] is not None else None
        args: dict[str, Any] = {"kernel": k["name"]}
        args.update(_call_args(call) if call else {"op": None,
                                                   "note": "outside any counted op"})
        args["regime"] = k["regime"]  # the kernel's own: a GEMM's transposes are memory
        if "phase" in k:  # the kernel row's own (None: outside any op); older rows lack it
            args["phase"] = k["phase"]
        events.append(_x(k["name"], TID_KERNELS, start, dur, args, "kernel"))
        if call is not None:
            span = spans.setdefault(call["index"], [start, start + dur])
            span[0], span[1] = min(span[0], start), max(span[1], start + dur)
    for idx, (a, b) in sorted(spans.items(), key=lambda kv: kv[1][0]):
        call = calls[idx]
        events.append(_x(call["op"], TID_OPS, a, b - a, _call_args(call),
                         f"op,{call['regime']}"))
    idle_us = 0.0
    end = None
    for start, dur, _k in sorted(placed, key=lambda p: p[0]):
        if end is not None and start > end:
            gap = start - end
            idle_us += gap
            events.append(_x("idle", TID_IDLE, end, gap, {"gap_us": round(gap, 3)},
                             "idle"))
        end = start + dur if end is None else max(end, start + dur)
    meta = {"timeline": "device: kernel start times and durations from the torch profiler",
            "kernels": len(placed), "kernels_without_start_time": unplaced,
            "idle_between_kernels_us": round(idle_us, 3),
            "first_to_last_kernel_us": round(end if end is not None else 0.0, 3)}
    return events, meta


def _cpu_events(budget: dict[str, Any]) -> tuple[list[dict], dict]:
    events: list[dict] = []
    t_us = 0.0
    for row in budget["per_call"]:
        if row["time_s"] <= 0:
            continue  # views and bookkeeping: no execution time to draw
        dur = row["time_s"] * 1e6
        events.append(_x(row["op"], TID_OPS, t_us, dur, _call_args(row),
                         f"op,{row['regime']}"))
        t_us += dur
    rest_us = max(0.0, budget["wall_s"] * 1e6 - t_us)
    if rest_us > 0:
        events.append(_x("not in any op: Python, dispatch", TID_IDLE, t_us, rest_us,
                         {"us": round(rest_us, 3)}, "idle"))
    meta = {"timeline": "synthesized: CPU ops laid end to end in call order with the "
                        "time each took when replayed alone; the rest of the wall time "
                        "is one span at the end. Positions are not measured.",
            "ops_us": round(t_us, 3), "not_in_any_op_us": round(rest_us, 3)}
    return events, meta


def trace_dict(report: dict[str, Any]) -> dict[str, Any]:
    """The trace of a report dict (`Report.to_dict()`), as a JSON-ready dict."""
    budget = report["budget"]
    if "per_call" not in budget:
        raise UserError("this report has no per-call rows (schema_version "
                        f"{report.get('schema_version')}); re-run gobrrr doctor to trace it")
    w = report["workload"]
    device = w["device"]
    if device == "cuda":
        events, meta = _cuda_events(budget)
        tracks = {TID_KERNELS: "GPU kernels", TID_OPS: "ops (gobrrr: regime, FLOPs, bytes)",
                  TID_IDLE: "GPU idle (gaps between kernels)"}
    else:
        events, meta = _cpu_events(budget)
        tracks = {TID_OPS: "CPU ops (synthesized timeline)",
                  TID_IDLE: "overhead (not in any op)"}
    header = [_meta("process_name", None, f"gobrrr: {w['name']} on {device}")]
    header += [_meta("thread_name", tid, name) for tid, name in tracks.items()]
    header += [_meta("thread_sort_index", tid, tid, "sort_index") for tid in tracks]
    fp = report["machine"]["fingerprint"]
    other = {"gobrrr.workload": w["name"], "gobrrr.device": device,
             "gobrrr.machine": fp.get("name", device), "gobrrr.torch": fp.get("torch"),
             "gobrrr.regime": report["regime"],
             "gobrrr.wall_us": round(budget["wall_s"] * 1e6, 3),
             "gobrrr.created": report["created"]}
    other.update({f"gobrrr.{k}": v for k, v in meta.items()})
    return {"traceEvents": header + events, "displayTimeUnit": "ns", "otherData": other}


def write_trace(report: dict[str, Any], path: str | Path) -> Path:
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(json.dumps(trace_dict(report), default=str), encoding="utf-8")
    return p
