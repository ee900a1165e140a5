"""Read a `torch.profiler` trace written elsewhere (Chrome trace-event JSON, `.json` or
`.json.gz`, from `prof.export_chrome_trace` or `tensorboard_trace_handler`) into plain
data: kernels, CPU ops and profiler steps.

The links are the ones Kineto writes: a kernel's `args["External id"]` is the External id
of the CPU op that launched it (`cpu_op` events), and its `args["correlation"]` that of the
runtime call (`cuda_runtime`). Steps are the `ProfilerStep#N` user annotations on the CPU
timeline. Times are microseconds on the trace's clock, as written.
"""

from __future__ import annotations

import gzip
import json
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gobrrr.errors import UserError

__all__ = ["TraceKernel", "TraceOp", "TraceStep", "RawTrace", "read_trace", "parse_trace"]


@dataclass(frozen=True)
class TraceKernel:
    name: str
    ts_us: float
    dur_us: float
    stream: int | None
    correlation: int | None
    external_id: int | None
    op: str | None  # the launching CPU op's name (by External id), None when unlinked


@dataclass(frozen=True)
class TraceOp:
    name: str
    ts_us: float
    dur_us: float
    external_id: int | None
    input_dims: list[Any] = field(default_factory=list)
    input_types: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class TraceStep:
    name: str  # "ProfilerStep#N"
    ts_us: float
    dur_us: float


@dataclass
class RawTrace:
    kernels: list[TraceKernel]
    ops: list[TraceOp]
    steps: list[TraceStep]
    device_properties: list[dict[str, Any]]
    record_shapes: bool

    def kernels_in(self, step: TraceStep) -> list[TraceKernel]:
        """Kernels launched during a step: those whose CPU op starts inside the step's
        CPU span (a kernel itself may run after the step's CPU side has ended)."""
        op_ts = {o.external_id: o.ts_us for o in self.ops if o.external_id is not None}
        end = step.ts_us + step.dur_us
        return [k for k in self.kernels
                if k.external_id in op_ts and step.ts_us <= op_ts[k.external_id] <= end]


def _int(x: Any) -> int | None:
    return x if isinstance(x, int) else None


def parse_trace(data: Any, source: str = "trace") -> RawTrace:
    """A loaded trace (the JSON object) as a RawTrace; a UserError if it is not one."""
    if not isinstance(data, dict) or not isinstance(data.get("traceEvents"), list):
        raise UserError(f"{source} is not a torch.profiler trace (no traceEvents list)")
    ops: list[TraceOp] = []
    steps: list[TraceStep] = []
    raw_kernels: list[dict[str, Any]] = []
    for e in data["traceEvents"]:
        if not isinstance(e, dict) or e.get("ph") != "X":
            continue
        cat, name = e.get("cat"), str(e.get("name", ""))
        if cat == "kernel":
            raw_kernels.append(e)
        elif cat == "cpu_op":
            a = e.get("args", {})
            ops.append(TraceOp(name, float(e["ts"]), float(e.get("dur", 0.0)),
                               _int(a.get("External id")), a.get("Input Dims", []),
                               a.get("Input type", [])))
        elif cat == "user_annotation" and name.startswith("ProfilerStep#"):
            steps.append(TraceStep(name, float(e["ts"]), float(e.get("dur", 0.0))))
    by_ext = {o.external_id: o.name for o in ops if o.external_id is not None}
    kernels = []
    for e in raw_kernels:
        a = e.get("args", {})
        ext = _int(a.get("External id"))
        kernels.append(TraceKernel(str(e["name"]), float(e["ts"]), float(e.get("dur", 0.0)),
                                   _int(a.get("stream")), _int(a.get("correlation")), ext,
                                   None if ext is None else by_ext.get(ext)))
    kernels.sort(key=lambda k: k.ts_us)
    ops.sort(key=lambda o: o.ts_us)
    steps.sort(key=lambda s: s.ts_us)
    return RawTrace(kernels, ops, steps, list(data.get("deviceProperties", [])),
                    bool(data.get("record_shapes", False)))


def read_trace(path: str | Path) -> RawTrace:
    """Read a trace file; bad input (missing, truncated .gz, not JSON, not a profiler
    trace) is one UserError line, never a traceback."""
    p = Path(path)
    try:
        raw = p.read_bytes()
        if raw[:2] == b"\x1f\x8b":  # gzip magic, whatever the suffix
            raw = gzip.decompress(raw)
        data = json.loads(raw)
    except FileNotFoundError:
        raise UserError(f"no such file: {p}") from None
    except (OSError, EOFError, zlib.error) as exc:
        raise UserError(f"{p}: cannot read it ({exc})") from None
    except ValueError as exc:
        raise UserError(f"{p} is not JSON ({exc})") from None
    return parse_trace(data, str(p))
