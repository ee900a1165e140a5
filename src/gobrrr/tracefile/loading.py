"""The wait for data in a trace: torch wraps every DataLoader iterator's `__next__` in a
`enumerate(DataLoader)#<iterator class>.__next__` range (phases.DATA_LOADER_RANGE), so
a trace recorded anywhere says, per profiled step, how long the loop waited for its next
batch and, against the device's activity (kernels, copies, memsets), how much of that
wait the device sat idle. A CPU-only trace: the host is the device, all of it is idle.
"""

from __future__ import annotations

import numpy as np

from gobrrr.intervals import clip, subtract, union
from gobrrr.phases import DATA_LOADER_RANGE
from gobrrr.run import DataLoading
from gobrrr.tracefile.columns import TraceColumns

__all__ = ["data_loading_in", "loader_ranges"]


def loader_ranges(cols: TraceColumns) -> tuple[np.ndarray, np.ndarray]:
    """(starts_us, ends_us) of the trace's DataLoader `__next__` ranges."""
    ids = [i for i, n in enumerate(cols.names) if n.startswith(DATA_LOADER_RANGE)]
    cpu = cols.cpu
    if not ids or not len(cpu["ts_us"]):
        return np.zeros(0), np.zeros(0)
    mask = np.isin(cpu["name"], ids)
    starts = cpu["ts_us"][mask]
    return starts, starts + cpu["dur_us"][mask]


def data_loading_in(cols: TraceColumns) -> DataLoading | None:
    """Per profiled step (the whole trace without ProfilerStep# ranges), the time inside
    DataLoader ranges and its part with no device activity; None: no such range."""
    starts, ends = loader_ranges(cols)
    if not len(starts):
        return None
    if cols.steps:
        windows = [(ts, ts + dur) for _, ts, dur in cols.steps]
    else:
        windows = [(float(starts.min()), float(ends.max()))]
    dev = cols.device
    d_starts, d_ends = union(dev["ts_us"], dev["ts_us"] + dev["dur_us"])
    host_us, idle_us = [], []
    for lo, hi in windows:
        s, e = union(*clip(starts, ends, lo, hi))
        host_us.append(float((e - s).sum()))
        if len(d_starts):
            s, e = subtract(s, e, d_starts, d_ends)
        idle_us.append(float((e - s).sum()))
    n = len(windows)
    on = "with no kernel or copy running" if cols.has_device_activity else \
        "(a CPU trace: all of it)"
    return DataLoading(
        host_s=sum(host_us) * 1e-6 / n, exposed_s=sum(idle_us) * 1e-6 / n,
        per_step_s=tuple(h * 1e-6 for h in host_us),
        source=f"the trace's DataLoader __next__ ranges in {n} step(s), the device idle "
               f"part {on}")
