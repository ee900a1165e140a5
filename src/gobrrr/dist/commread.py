"""One rank's communication read from its torch.profiler trace: `read_trace` -> RankTrace
(what the facts are and why: comm.py's module docstring).

The trace is reduced to columns first (tracestream: `stream_trace` for a file, streamed,
so a rank's trace of a gigabyte stays within a few hundred MB; `columns_of` for a dict
already in memory), and everything here works on those columns: the window's range,
the collectives (their recorded metadata is the one part kept whole, a few events per
step), the compute intervals and the launches inside `record_param_comms` and DDP's
bucket-copy ranges (found per thread by binary search, not by a scan of every launch
against every range). `gobrrr analyze` passes the columns it already streamed
(`read_columns`), so each rank's trace is read once.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from gobrrr.dist.comm import (
    BUCKET_COPY_RANGES,
    COPY_BACK_RANGE,
    WINDOW,
    Collective,
    RankTrace,
    element_bytes,
    normalise_collective,
)
from gobrrr.intervals import Interval, as_list, clip, subtract, union
from gobrrr.phases import launches_collective
from gobrrr.tracefile.columns import CPU_OP, STEP_PREFIX, TraceColumns, columns_of, stream_trace
from gobrrr.tracefile.read import read_header

__all__ = ["read_trace", "read_columns", "group_name"]


def read_trace(trace: dict[str, Any] | str | Path, rank: int, steps: int,
               device: str, window: str = WINDOW) -> RankTrace:
    """One rank's exported Chrome trace (a dict, or the JSON file, streamed) -> its
    RankTrace, inside the `window` range (read_columns)."""

    if isinstance(trace, dict):
        return read_columns(columns_of(trace), rank, steps, device, window,
                            group_name(trace.get("distributedInfo")))
    return read_columns(stream_trace(trace), rank, steps, device, window,
                        group_name(read_header(trace).distributed))


def group_name(distributed_info: Any) -> str:
    """The process group's name from the trace's `distributedInfo` ("0" when absent:
    gloo's traces name none)."""
    info = distributed_info if isinstance(distributed_info, dict) else {}
    return str(((info.get("pg_config") or [{}])[0]).get("pg_name", "0"))


def read_columns(cols: TraceColumns, rank: int, steps: int, device: str,
                 window: str = WINDOW, group: str = "0") -> RankTrace:
    """The RankTrace inside the `window` range (a name ending in "#", such as
    "ProfilerStep#", takes every range with that prefix: the window runs from the first
    one's start to the last one's end, or to the end of the device work launched inside
    them, whichever is later, on the thread of the first)."""
    lo, hi, main_thread, host_hi = _window(cols, window, rank)
    if device == "cuda":
        out = _read_cuda(cols, rank, steps, lo, hi, group)
        out.host_us = _host_us(cols, main_thread, lo, host_hi)
        return out
    return _read_cpu(cols, rank, steps, lo, hi, main_thread, group)


_NO_ROWS = np.zeros(0, dtype=np.int64)


def _names_where(cols: TraceColumns, pred: Callable[[str], bool]) -> np.ndarray:
    """A boolean per name id: index it with a name column."""
    return np.array([pred(n) for n in cols.names] or [False], dtype=bool)


def _host_us(cols: TraceColumns, thread: int, lo: float, hi: float) -> float:
    """The host's own time in [lo, hi] on the steps' `thread`: the span less its calls
    that wait for the device (BLOCKING_CALLS), each clipped to the span."""
    launch = cols.launch
    blocks = launch.get("blocks")
    if blocks is None or not len(blocks):
        return hi - lo
    on = (launch["thread"] == thread) & (blocks != 0)
    s = np.clip(launch["ts_us"][on], lo, hi)
    e = np.clip(launch["ts_us"][on] + launch["dur_us"][on], lo, hi)
    ws, we = union(s, e)
    return float(hi - lo - float((we - ws).sum()))


def _window(cols: TraceColumns, window: str, rank: int) -> tuple[float, float, int, float]:
    """(start, end, thread of the first range) of the window."""
    cpu, ann = cols.cpu, cols.gpu_ann
    # (ts, end, thread); the device-side copies have no CPU thread (-1)
    ranges: list[tuple[float, float, int]] = []
    if window.endswith("#"):
        hit = _names_where(cols, lambda n: n.startswith(window))
        rows = np.flatnonzero(hit[cpu["name"]]) if len(cpu["name"]) else _NO_ROWS
        ranges += [(float(cpu["ts_us"][r]), float(cpu["ts_us"][r] + cpu["dur_us"][r]),
                    int(cpu["thread"][r])) for r in rows]
        if window == STEP_PREFIX:  # tracestream keeps those apart, sorted: its steps
            ranges += [(ts, ts + dur, cols.steps_thread if i == 0 else -1)
                       for i, (_, ts, dur) in enumerate(cols.steps)]
        if len(ann.get("name", [])):
            ranges += [(float(ann["ts_us"][r]), float(ann["ts_us"][r] + ann["dur_us"][r]),
                        -1) for r in np.flatnonzero(hit[ann["name"]])]
        ranges.sort(key=lambda r: r[0])
    else:
        # The first range of that name in the file: Kineto writes the CPU events first
        hit = _names_where(cols, lambda n: n == window)
        for part, thread_of in ((cpu, lambda r: int(cpu["thread"][r])),
                                (ann, lambda r: -1)):
            if not len(part.get("name", [])):
                continue
            rows = np.flatnonzero(hit[part["name"]])
            if len(rows):
                r = int(rows[0])
                ts = float(part["ts_us"][r])
                ranges = [(ts, ts + float(part["dur_us"][r]), thread_of(r))]
                break
    if not ranges:
        raise ValueError(f"rank {rank}: the profiled trace has no {window} range")
    lo, hi = ranges[0][0], max(r[1] for r in ranges)
    host_hi = hi  # where the host's ranges end: the window may reach further on the device
    if window.endswith("#"):
        hi = max(hi, _launched_work_end(cols, lo, hi))
    return lo, hi, ranges[0][2], host_hi


def _launched_work_end(cols: TraceColumns, lo: float, hi: float) -> float:
    """The end of the device work launched (by correlation id) in [lo, hi]; lo where
    none. The steps' device-side copies do not reach it: Kineto sizes each to the kernels
    launched directly in the step range, so a step whose kernels come from a module's
    range (DDP's forward) has a copy of a few microseconds, while its all-reduces end
    tens of milliseconds after the host's step range (two H200s, ddp_straggler's rank 0:
    the window ended 37 ms early and read 8 of the profiled steps' 12 all-reduces).
    tracefile/steps.py's spans end at the same point."""
    launch, dev = cols.launch, cols.device
    if not len(launch.get("corr", [])) or not len(dev.get("corr", [])):
        return lo
    inside = (launch["ts_us"] >= lo) & (launch["ts_us"] <= hi) & (launch["corr"] >= 0)
    mine = np.isin(dev["corr"], launch["corr"][inside]) & (dev["corr"] >= 0)
    return float((dev["ts_us"][mine] + dev["dur_us"][mine]).max()) if mine.any() else lo


def _args(cols: TraceColumns, part: dict[str, np.ndarray], row: int) -> dict[str, Any]:
    i = int(part["args"][row])
    return cols.args[i] if i >= 0 else {}


# The views DDP's reducer takes of a bucket before it copies the bucket back
_BUCKET_VIEWS = frozenset({"aten::as_strided", "aten::view", "aten::alias"})


def _read_cpu(cols: TraceColumns, rank: int, steps: int, lo: float, hi: float,
              main_thread: int, group: str) -> RankTrace:
    cpu = cols.cpu
    name = cpu["name"]
    on_main_op = (cpu["thread"] == main_thread) & (cpu["kind"] == CPU_OP)
    is_launch = on_main_op & _names_where(cols, launches_collective)[name]
    is_aten = on_main_op & _names_where(cols, lambda n: n.startswith("aten::"))[name]
    ts, end = cpu["ts_us"], cpu["ts_us"] + cpu["dur_us"]
    compute = as_list(*union(*clip(*subtract(ts[is_aten], end[is_aten], ts[is_launch],
                                             end[is_launch]), lo, hi)))
    gloo_rows = np.flatnonzero(_names_where(cols, lambda n: n.startswith("gloo:"))[name]
                               & (cpu["thread"] != main_thread) & (end > lo) & (ts < hi))
    gloo_rows = gloo_rows[np.argsort(ts[gloo_rows], kind="stable")]
    issued = np.flatnonzero(is_launch & (ts >= lo) & (ts < hi))
    issued = issued[np.argsort(ts[issued], kind="stable")]
    out: list[Collective] = []
    for i, r in enumerate(gloo_rows.tolist()):
        s, t = float(ts[r]), float(end[r])
        # FSDP2's collectives by the c10d op that issued them (gloo's ranges follow the
        # ops' order): gloo runs a reduce-scatter as an all-reduce of the whole input
        # (its range says gloo:all_reduce) and names an all-gather's range by its input
        # (the shard). nccl-tests' size for both is the whole tensor: the op's largest.
        op = int(issued[i]) if len(issued) == len(gloo_rows) else None
        if op is not None:
            op_name = normalise_collective(cols.names[name[op]].split("::")[-1].rstrip("_"))
            if op_name in ("all_gather", "reduce_scatter"):
                out.append(Collective(group, len(out), op_name,
                                      _largest_bytes(_args(cols, cpu, op)), s, t - s))
                continue
        args = _args(cols, cpu, r)
        dims = (args.get("Input Dims") or [[]])[0]
        types = args.get("Input type") or [""]
        nel = 1
        for d in dims if isinstance(dims, list) else []:
            nel *= int(d)
        size = element_bytes(types[0])
        out.append(Collective(group, len(out), normalise_collective(cols.names[name[r]]),
                              nel * size if size and dims else None, s, t - s))
    is_copy = _names_where(cols, lambda n: n in BUCKET_COPY_RANGES)[name]
    copy_back = (cpu["thread"] == main_thread) & _names_where(
        cols, lambda n: n == COPY_BACK_RANGE)[name]
    views = _names_where(cols, lambda n: n in _BUCKET_VIEWS)[name]
    waited = _waited_for_buckets(ts, end, cpu["thread"] == main_thread, copy_back, views,
                                 [(c.start_us, c.end_us) for c in out])
    blocked = as_list(*union(*clip(
        np.concatenate([ts[is_launch], np.array([a for a, _ in waited])]),
        np.concatenate([end[is_launch], np.array([b for _, b in waited])]), lo, hi)))
    return RankTrace(rank, steps, hi - lo, out, compute, "cpu", blocked=blocked,
                     bucket_copy=_window_union(ts, end, is_copy, lo, hi))


def _waited_for_buckets(ts: np.ndarray, end: np.ndarray, on_main: np.ndarray,
                        copy_back: np.ndarray, views: np.ndarray,
                        comm: list[Interval]) -> list[Interval]:
    """The step thread's idle stretches after which it next copies an all-reduced bucket
    back (COPY_BACK_RANGE; only views of the bucket, `views`, between) and during which a
    collective ran: the thread was blocked in DDP's wait for that all-reduce, from its
    last event to its next.

    On a loaded CPU that wait outlasts gloo's range: the thread wakes when a core is free.
    On this project's 2-core machine, two gloo ranks of `examples:ddp_comm`: one step's
    thread resumed 3.2 ms after the last all-reduce's range had ended; it counted as
    overhead, while no_sync() removes it with the all-reduce (issue 23: the traces read
    their exposed communication under the no_sync bound)."""
    rows = np.flatnonzero(on_main)
    if not len(rows) or not copy_back.any():
        return []
    rows = rows[np.argsort(ts[rows], kind="stable")]
    out: list[Interval] = []
    reach = float(end[rows[0]])  # the latest end so far: events nest
    for i in range(1, len(rows)):
        r = rows[i]
        start = float(ts[r])
        if start > reach:
            nxt = next((int(q) for q in rows[i:] if not views[q]), None)
            if nxt is not None and copy_back[nxt] \
                    and any(a < start and b > reach for a, b in comm):
                out.append((reach, start))
        reach = max(reach, float(end[r]))
    return out


def _largest_bytes(args: dict[str, Any]) -> int | None:
    """The largest tensor among an op's recorded inputs, in bytes (record_shapes)."""
    best = None
    for dims, typ in zip(args.get("Input Dims") or [], args.get("Input type") or [],
                         strict=False):
        size = element_bytes(str(typ))
        if not size or not isinstance(dims, list) or not dims or isinstance(dims[0], list):
            continue
        nel = 1
        for d in dims:
            nel *= int(d)
        best = max(best or 0, nel * size)
    return best


def _int(x: Any) -> int | None:
    try:
        return int(x)
    except (TypeError, ValueError):
        return None


def _read_cuda(cols: TraceColumns, rank: int, steps: int, lo: float, hi: float,
               group: str) -> RankTrace:
    dev = cols.device
    devices = set(dev["device"].tolist()) - {-1}
    notes = []
    if len(devices) > 1:
        notes.append(f"rank {rank}: kernels on devices {sorted(devices)}; all are counted")
    # Fallback link: a kernel launched from inside a record_param_comms CPU op; and the
    # work launched inside DDP's bucket-copy ranges (BUCKET_COPY_RANGES).
    meta_of_corr = _launched_inside(cols, lambda n: n == "record_param_comms")
    copy_corr = set(_launched_inside(cols, lambda n: n in BUCKET_COPY_RANGES))
    corr = dev["corr"]
    is_copy = np.isin(corr, np.fromiter(copy_corr, dtype=np.int64, count=len(copy_corr)))
    linked = np.isin(corr, np.fromiter(meta_of_corr, dtype=np.int64,
                                       count=len(meta_of_corr)))
    # tracestream.DEVICE_KINDS[0] is "kernel": memcpys and memsets are never collectives
    is_comm = (dev["kind"] == 0) & ((dev["comm"] != 0) | linked)
    comm = [(r, _args(cols, dev, r) if dev["comm"][r] else meta_of_corr[int(corr[r])])
            for r in np.flatnonzero(is_comm).tolist()]
    ts, end = dev["ts_us"], dev["ts_us"] + dev["dur_us"]
    comm.sort(key=lambda p: float(ts[p[0]]))
    step_of = _launch_steps(cols)
    order: dict[str, int] = {}
    out: list[Collective] = []
    for r, meta in comm:
        s, t = float(ts[r]), float(end[r])
        if t <= lo or s >= hi:
            continue
        g = str(meta.get("Process Group Name", group))
        seq = _int(meta.get("Seq"))
        n_order = order.get(g, 0)
        order[g] = n_order + 1
        name = normalise_collective(str(meta.get("Collective name", "")))
        nel = _int(meta.get("Out msg nelems") if name == "all_gather"
                   else meta.get("In msg nelems"))
        size = element_bytes(meta.get("dtype"))
        out.append(Collective(g, seq if seq is not None else n_order, name,
                              nel * size if nel is not None and size else None, s, t - s,
                              step_of.get(int(corr[r]), -1)))
    return RankTrace(rank, steps, hi - lo, out, _window_union(ts, end, ~is_comm, lo, hi),
                     "cuda", notes, bucket_copy=_window_union(ts, end, is_copy, lo, hi))


def _launch_steps(cols: TraceColumns) -> dict[int, int]:
    """correlation id -> the index of the ProfilerStep# range its launch call was made
    in (ranges on any thread: the backward's launches come from autograd's)."""
    launch = cols.launch
    if not cols.steps or not len(launch.get("corr", [])):
        return {}
    starts = np.array([ts for _, ts, _ in cols.steps])
    ends = starts + np.array([dur for _, _, dur in cols.steps])
    t = launch["ts_us"]
    k = np.searchsorted(starts, t, side="right") - 1
    ok = (k >= 0) & (launch["corr"] >= 0)
    ok &= t <= ends[np.maximum(k, 0)]
    return dict(zip(launch["corr"][ok].tolist(), k[ok].tolist(), strict=True))


def _window_union(start: np.ndarray, end: np.ndarray, rows: np.ndarray, lo: float,
                  hi: float) -> list[Interval]:
    """The union of the rows' intervals clipped to [lo, hi), as RankTrace holds it."""
    return as_list(*union(*clip(start[rows], end[rows], lo, hi)))


def _launched_inside(cols: TraceColumns, is_range: Callable[[str], bool]
                     ) -> dict[int, dict[str, Any]]:
    """correlation id -> the args of the CPU range (named as `is_range` says) that the
    CUDA runtime call with that id was made inside (same thread, start within the
    range; of nested ones, the latest to start)."""
    cpu, launch = cols.cpu, cols.launch
    rows = np.flatnonzero(_names_where(cols, is_range)[cpu["name"]]) \
        if len(cpu["name"]) else _NO_ROWS
    out: dict[int, dict[str, Any]] = {}
    for thread in np.unique(cpu["thread"][rows]).tolist():
        mine = rows[cpu["thread"][rows] == thread]
        mine = mine[np.argsort(cpu["ts_us"][mine], kind="stable")]
        starts = cpu["ts_us"][mine]
        ends = starts + cpu["dur_us"][mine]
        # The furthest end of the ranges started so far: a launch after the latest start
        # lies inside some range exactly when it is before that end.
        reach = np.maximum.accumulate(ends)
        on = np.flatnonzero((launch["thread"] == thread) & (launch["corr"] >= 0))
        ts = launch["ts_us"][on]
        k = np.searchsorted(starts, ts, side="right") - 1
        inside = (k >= 0) & (ts <= reach[np.maximum(k, 0)])
        for lx, kk in zip(on[inside].tolist(), k[inside].tolist(), strict=True):
            t = float(launch["ts_us"][lx])
            # the latest range to start before the launch, unless it ended before it: then
            # the latest earlier one still open (nested ranges)
            j = kk if t <= ends[kk] else int(np.flatnonzero(ends[:kk + 1] >= t)[-1])
            out[int(launch["corr"][lx])] = _args(cols, cpu, int(mine[j]))
    return out
