"""Stream the events of a torch.profiler trace of any size into compact columns.

One pass of ijson over `traceEvents` (tracefile.ijson_backend: its C backend when
installed). Each event is reduced at once to the few numbers the analysis needs and
appended to typed arrays, so memory grows by tens of bytes per event, not by a Python dict
per event: a 1 GB trace of ~4 million events stays within a few hundred MB
(benchmarks/analyze_large.py). Strings are interned: each op and kernel name once, and
each distinct recorded argument list ("Input Dims", "Input type", "Input Strides",
"Concrete Inputs") once per shape signature.

What is kept, per kind of event (Kineto's categories):
- `cpu_op` and `user_annotation` (record_function ranges): thread, start, duration, name,
  External id, shape signature. `ProfilerStep#N` annotations become the steps.
- `cuda_runtime` / `cuda_driver` (launch calls): thread, start, duration, correlation id
  and External id, to link a kernel that carries no External id of its own.
- `kernel`, `gpu_memcpy`, `gpu_memset` (device activity): start, duration, name, External
  id, correlation id, stream, device, and whether the profiler's collective metadata
  ("Collective name", which Kineto copies onto NCCL kernels) marks it communication.
- `gpu_user_annotation` (record_function ranges as the device ran them): start, duration,
  name. A profiled step's device work can end after its CPU range does.
- The recorded args that dist/commread.py reads (COMM_ARG_KEYS: collective metadata,
  tensor dims and dtypes) of the few events that describe communication: kernels with
  collective metadata, and CPU events that launch or run a collective
  (`record_param_comms`, `c10d::*` ops, gloo's `gloo:*` ranges); an `args` column holds
  each event's index into `TraceColumns.args` (-1: not kept).
Everything else (flows, metadata, Python frames) is skipped.

`stream_trace` reads a file; `columns_of` reduces a trace already in memory (a dict) the
same way, so one reader serves both.
"""

from __future__ import annotations

import math
from array import array
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from gobrrr.errors import UserError
from gobrrr.phases import launches_collective
from gobrrr.tracefile.read import READ_BUFFER_BYTES, ijson_backend, open_trace, reading

__all__ = ["RecordedArgs", "StepRule", "TraceColumns", "stream_trace", "columns_of", "CPU_OP",
           "ANNOTATION", "DEVICE_KINDS", "STEP_PREFIX"]

CPU_OP, ANNOTATION = 0, 1  # kinds of CPU events
DEVICE_KINDS = ("kernel", "gpu_memcpy", "gpu_memset")
_DEVICE_KIND = {c: i for i, c in enumerate(DEVICE_KINDS)}
_LAUNCH_CATS = frozenset({"cuda_runtime", "cuda_driver"})
# Runtime and driver calls that hold the host until the device has caught up: a rank's
# host time inside them is waiting, not the host's own work (dist/accounting.py's paces)
BLOCKING_CALLS = frozenset({
    "cudaDeviceSynchronize", "cudaStreamSynchronize", "cudaEventSynchronize",
    "cudaMemcpy", "cuCtxSynchronize", "cuStreamSynchronize", "cuEventSynchronize",
    "cuMemcpyDtoH_v2"})
STEP_PREFIX = "ProfilerStep#"

# The recorded args dist/comm.py reads from those events: the collective's metadata (NCCL)
# and the tensors' dims and dtypes (gloo's ranges, c10d ops). Only these are kept: a rank
# trace of a long job has a few of these events per collective, hundreds of thousands.
COMM_ARG_KEYS = ("Collective name", "In msg nelems", "Out msg nelems", "dtype",
                 "Process Group Name", "Seq", "Input Dims", "Input type")


def _describes_communication(name: str) -> bool:
    """CPU events whose recorded args dist/comm.py reads (sizes, dtypes, metadata)."""
    return launches_collective(name) or name.startswith("gloo:")


@dataclass(frozen=True)
class RecordedArgs:
    """An op's arguments as the profiler recorded them (record_shapes=True), one entry
    per argument of the op's schema: dims ([] for a scalar or a non-tensor), type (a C++
    dtype name such as "float", or "Scalar", "ScalarList", "TensorList", "" when not
    recorded), strides, and the value of scalars as text ("Concrete Inputs")."""

    dims: list[Any]
    types: list[str]
    strides: list[Any] | None
    concrete: list[str] | None


@dataclass(frozen=True)
class StepRule:
    """How a trace's steps were found (stepfind.py). kind: "profiler" (ProfilerStep#N
    ranges), "record_function" (a user's repeated range), "repeated calls" (a repeated
    sequence of top-level calls) or "window" (one step); `label` names the steps; `note`
    is the report's sentence."""

    kind: str
    label: str
    note: str
    summary: str = ""  # the health check's short form (health.py)

    def name(self, number: int, index: int) -> str:
        """The name of the step numbered `number` (ProfilerStep#N's N), `index`-th."""
        if self.kind == "profiler":
            return f"{self.label}{number}"
        return self.label if self.kind == "window" else f"{self.label}{index + 1}"


@dataclass
class TraceColumns:
    """A trace's events as numpy columns (times in microseconds on the trace's clock)."""

    path: Path
    names: list[str]  # op, annotation and kernel names by id
    sigs: list[RecordedArgs]  # recorded arguments by shape-signature id
    steps: list[tuple[int, float, float]]  # (N of ProfilerStep#N, ts_us, dur_us)
    cpu: dict[str, np.ndarray]  # ts_us dur_us thread name ext sig kind args
    launch: dict[str, np.ndarray]  # ts_us dur_us thread corr ext blocks (BLOCKING_CALLS)
    device: dict[str, np.ndarray]  # ts_us dur_us name ext corr stream device kind comm args
    events: int = 0  # traceEvents read, of every kind
    notes: list[str] = field(default_factory=list)
    steps_thread: int = -1  # the thread of the first ProfilerStep# range
    gpu_ann: dict[str, np.ndarray] = field(default_factory=dict)  # ts_us dur_us name
    args: list[dict[str, Any]] = field(default_factory=list)  # by the `args` columns
    step_rule: StepRule | None = None  # how `steps` were found: None until stepfind.py
    malformed: int = 0  # events left out: a field of the wrong type, a negative time
    graph_launches: int = 0  # cudaGraphLaunch calls (CUDA graph replays)

    @property
    def has_device_activity(self) -> bool:
        return len(self.device["ts_us"]) > 0


def _shape_concrete(concrete: Any) -> str:
    """The recorded scalar values that can change shapes or dtypes (ints, bools, int lists,
    dtype codes), as text. Float values (learning rates, Adam's bias corrections, which
    change every step) are left out, so one op called with new floats each step keeps one
    signature and its calls line up across steps."""
    if not isinstance(concrete, list):
        return ""
    return "|".join("~" if isinstance(c, str) and ("." in c or "e" in c and c not in (
        "True", "False")) else str(c) for c in concrete)


_INT64_MAX = 2**63 - 1


def _int(x: Any) -> int:
    """An id as written, or -1 (absent, not an integer, or beyond int64: no id of a
    profiler's; an External id of 10^30 was once taken for malformed JSON)."""
    if isinstance(x, int) and not isinstance(x, bool) and 0 <= x <= _INT64_MAX:
        return x
    return -1


def _dims_ok(x: Any, depth: int = 0) -> bool:
    """A recorded dims entry: an int, or a list of them (a TensorList: lists of lists)."""
    if isinstance(x, int) and not isinstance(x, bool):
        return True
    return isinstance(x, list) and depth < 3 and all(_dims_ok(v, depth + 1) for v in x)


def _shapes_ok(dims: Any, types: Any) -> bool:
    """Whether an op's recorded shapes are as the profiler writes them ("Input Dims": a
    list of lists of ints, "Input type": a list of strings), so opcount can rebuild the
    op from them; anything else is an op recorded without shapes."""
    return (isinstance(dims, list) and all(isinstance(d, list) and _dims_ok(d) for d in dims)
            and (types is None or isinstance(types, list)
                 and all(isinstance(t, str) for t in types)))


def _key(e: dict[str, Any]) -> tuple[Any, Any] | None:
    """(pid, tid) of an event, or None when either is not an int or a string (a list: a
    malformed event)."""
    pid, tid = e.get("pid"), e.get("tid")
    ok = (int, str, type(None))
    return (pid, tid) if isinstance(pid, ok) and isinstance(tid, ok) else None


class _Columns:
    """Typed arrays being filled while the trace streams."""

    def __init__(self, spec: dict[str, str]) -> None:
        self.cols: dict[str, array[Any]] = {name: array(code) for name, code in spec.items()}

    def done(self) -> dict[str, np.ndarray]:
        out = {}
        for name, arr in self.cols.items():
            out[name] = np.frombuffer(arr, dtype=arr.typecode).copy() if len(arr) else \
                np.zeros(0, dtype=arr.typecode)
        return out


def stream_trace(path: str | Path) -> TraceColumns:
    """Every event of `traceEvents`, reduced to columns (see the module docstring); one
    UserError line for a file that cannot be read or parsed."""
    p = Path(path)
    backend, note = ijson_backend()
    with reading(p), open_trace(p) as f:
        out = _reduce(backend.items(f, "traceEvents.item", use_float=True,
                                    buf_size=READ_BUFFER_BYTES), p)
    if note:
        out.notes.append(note)
    return out


def columns_of(trace: dict[str, Any], path: str | Path = "<trace in memory>"
               ) -> TraceColumns:
    """A trace already loaded (the exported JSON as a dict), reduced like stream_trace."""
    events = trace.get("traceEvents") if isinstance(trace, dict) else None
    return _reduce(events if isinstance(events, list) else [], Path(path))


def _reduce(events: Iterable[Any], p: Path) -> TraceColumns:
    names: list[str] = []
    name_ids: dict[str, int] = {}
    sigs: list[RecordedArgs] = []
    sig_ids: dict[tuple, int] = {}
    threads: dict[tuple[Any, Any], int] = {}
    steps: list[tuple[int, float, float]] = []
    first_step: tuple[float, Any] = (float("inf"), None)  # earliest ProfilerStep#: ts, thread
    kept_args: list[dict[str, Any]] = []
    cpu = _Columns({"ts_us": "d", "dur_us": "d", "thread": "i", "name": "i", "ext": "q",
                    "sig": "i", "kind": "b", "args": "i"})
    launch = _Columns({"ts_us": "d", "dur_us": "d", "thread": "i", "corr": "q", "ext": "q",
                       "blocks": "b"})
    dev = _Columns({"ts_us": "d", "dur_us": "d", "name": "i", "ext": "q", "corr": "q",
                    "stream": "q", "device": "q", "kind": "b", "comm": "b", "args": "i"})
    ann = _Columns({"ts_us": "d", "dur_us": "d", "name": "i"})
    # Bound methods, looked up once: this loop runs once per event (millions).
    c_ts, c_dur, c_thread, c_name, c_ext, c_sig, c_kind, c_args = (
        cpu.cols[k].append for k in ("ts_us", "dur_us", "thread", "name", "ext", "sig",
                                     "kind", "args"))
    n_events = 0

    def name_id(name: str) -> int:
        i = name_ids.get(name)
        if i is None:
            i = name_ids[name] = len(names)
            names.append(name)
        return i

    def keep(args: dict[str, Any]) -> int:
        kept_args.append({k: args[k] for k in COMM_ARG_KEYS if k in args})
        return len(kept_args) - 1

    malformed = 0
    graph_launches = 0  # cudaGraphLaunch calls: kernels replayed from CUDA graphs
    for e in events:
        n_events += 1
        if not isinstance(e, dict) or e.get("ph") != "X":
            continue
        ts = e.get("ts")
        dur = e.get("dur", 0.0)
        cat = e.get("cat")
        key = _key(e)
        args = e.get("args")
        if args is None:
            args = {}
        # A field of the wrong type, a negative or non-finite time: no profiler writes
        # it, and a negative duration read as time made "21267%" shares. Left out, and
        # counted in a note, instead of a traceback or a budget that does not add up.
        if (not isinstance(ts, (int, float)) or not isinstance(dur, (int, float))
                or isinstance(ts, bool) or isinstance(dur, bool) or not math.isfinite(ts)
                or not math.isfinite(dur) or dur < 0 or not isinstance(cat, str)
                or key is None or not isinstance(args, dict)):
            malformed += 1
            continue
        dur = float(dur)
        if cat == "cpu_op" or cat == "user_annotation":
            name = str(e.get("name", ""))
            if cat == "user_annotation" and name.startswith(STEP_PREFIX):
                number = name[len(STEP_PREFIX):]
                steps.append((int(number) if number.isdigit() else len(steps),
                              float(ts), dur))
                if ts < first_step[0]:
                    first_step = (float(ts), key)
                continue
            thread = threads.get(key)
            if thread is None:
                thread = threads[key] = len(threads)
            sig = -1
            dims = args.get("Input Dims") if cat == "cpu_op" or name.startswith(
                "triton_") else None  # (recorded.is_inductor_kernel; kept import-light)
            types = args.get("Input type")
            if not _shapes_ok(dims, types):
                dims = None  # shapes recorded wrongly: the op counts as recorded without
            if dims is not None:
                nid = name_id(name)
                strides = args.get("Input Strides")
                strides = strides if isinstance(strides, list) and all(
                    isinstance(d, list) and _dims_ok(d) for d in strides) else None
                concrete = args.get("Concrete Inputs")
                concrete = concrete if isinstance(concrete, list) and all(
                    isinstance(c, (str, int, float)) for c in concrete) else None
                skey = (nid, repr(dims), repr(types), repr(strides),
                        _shape_concrete(concrete))
                sig = sig_ids.get(skey, -1)
                if sig < 0:
                    sig = sig_ids[skey] = len(sigs)
                    sigs.append(RecordedArgs(dims, list(types or []), strides,
                                             concrete))
            c_ts(float(ts))
            c_dur(dur)
            c_thread(thread)
            c_name(name_id(name))
            c_ext(_int(args.get("External id")))
            c_sig(sig)
            c_kind(CPU_OP if cat == "cpu_op" else ANNOTATION)
            c_args(keep(args) if _describes_communication(name) else -1)
        elif cat in _LAUNCH_CATS:
            thread = threads.get(key)
            if thread is None:
                thread = threads[key] = len(threads)
            cols = launch.cols
            call = str(e.get("name", ""))
            if call.startswith("cudaGraphLaunch"):
                graph_launches += 1
            cols["blocks"].append(call in BLOCKING_CALLS)
            cols["ts_us"].append(float(ts))
            cols["dur_us"].append(dur)
            cols["thread"].append(thread)
            cols["corr"].append(_int(args.get("correlation")))
            cols["ext"].append(_int(args.get("External id")))
        elif cat in _DEVICE_KIND:
            comm = "Collective name" in args
            cols = dev.cols
            cols["ts_us"].append(float(ts))
            cols["dur_us"].append(dur)
            cols["name"].append(name_id(str(e.get("name", ""))))
            cols["ext"].append(_int(args.get("External id")))
            cols["corr"].append(_int(args.get("correlation")))
            cols["stream"].append(_int(args.get("stream")))
            cols["device"].append(_int(args.get("device")))
            cols["kind"].append(_DEVICE_KIND[cat])
            cols["comm"].append(comm)
            cols["args"].append(keep(args) if comm else -1)
        elif cat == "gpu_user_annotation":
            cols = ann.cols
            cols["ts_us"].append(float(ts))
            cols["dur_us"].append(dur)
            cols["name"].append(name_id(str(e.get("name", ""))))
    out = TraceColumns(p, names, sigs, sorted(steps, key=lambda s: s[1]), cpu.done(),
                       launch.done(), dev.done(), n_events,
                       steps_thread=threads.get(first_step[1], -1), gpu_ann=ann.done(),
                       args=kept_args, malformed=malformed, graph_launches=graph_launches)
    if not len(out.cpu["ts_us"]) and not len(out.device["ts_us"]):
        raise UserError(f"{p} is not a torch.profiler trace (no cpu_op, user_annotation or "
                        "kernel events" + (f"; {malformed} malformed event(s)" if malformed
                                           else "") + ")")
    if malformed:
        out.notes.append(f"{malformed} malformed event(s) left out (a field of the wrong "
                         "type, a negative or non-finite time): no profiler writes them")
    return out
