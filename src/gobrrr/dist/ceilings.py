"""Communication ceilings: all-reduce, all-gather and reduce-scatter timed on this job's
process group from 1 KiB up, reported as algorithm and bus bandwidth by nccl-tests'
definitions, cached per topology. The distributed diagnosis compares each collective's
achieved bus bandwidth to `CommCeilings.busbw_at(collective, size)`.

Bandwidths (NVIDIA/nccl-tests, doc/PERFORMANCE.md, "Performance reported by NCCL tests"):
  algbw = S / t, where S is the collective's size in bytes: the buffer for all-reduce, and
         for all-gather and reduce-scatter "the size in bytes of the total array", i.e.
         the all-gather's output and the reduce-scatter's input (n times the per-rank part).
  busbw = algbw x 2(n-1)/n for all-reduce, algbw x (n-1)/n for all-gather and
         reduce-scatter: each rank must send and receive that share of S over its own
         link whatever the algorithm (ring or tree), so busbw is comparable with the
         link's peak for any n. It is a one-direction figure.

Timing (the collective ends when its slowest rank does): every rank runs the same number
of samples and calls, decided on rank 0 and broadcast; each sample starts after a barrier
and times `calls` back-to-back collectives (CUDA events on CUDA, time.perf_counter on
CPU, where gloo's calls return when done); each sample's per-call time is the maximum over
ranks, and the figure is the median over samples.
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import json
import math
import os
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from gobrrr import datasheet
from gobrrr.dist.lockstep import keep_stdout_for_results
from gobrrr.dist.topology import topology, topology_key
from gobrrr.errors import UserError
from gobrrr.hardware import cache_dir, read_cache, write_cache
from gobrrr.schema import SchemaError, validate

__all__ = [
    "COLLECTIVES", "SCHEMA_VERSION", "CollectivePoint", "CommCeilings", "busbw_factor",
    "default_sizes", "parse_size", "measure_collectives", "calibrate_distributed",
    "load_cached", "lookup_busbw", "cache_path", "ensure_process_group",
    "DEFAULT_MAX_BYTES_CUDA", "DEFAULT_MAX_BYTES_CPU",
]

SCHEMA_VERSION = 1
COLLECTIVES: tuple[str, ...] = ("all_reduce", "all_gather", "reduce_scatter")
DEFAULT_MIN_BYTES = 2**10
DEFAULT_MAX_BYTES_CUDA = 2**30
# gloo over shared memory on a small CPU: 64 MiB all-reduces take ~0.1-1 s each; beyond
# that the sweep costs minutes and says nothing new about a CPU job.
DEFAULT_MAX_BYTES_CPU = 64 * 2**20
_ELEM_BYTES = 4  # fp32, nccl-tests' default type; NCCL's transfer rate does not depend on it
# NCCL variables that only change logging: a ceiling measured with NCCL_DEBUG=INFO holds
# without it, so they are not part of the cache key.
_LOG_ONLY_NCCL_VARS = ("NCCL_DEBUG", "NCCL_DEBUG_SUBSYS", "NCCL_DEBUG_FILE")
Progress = Callable[[str], None]


def busbw_factor(collective: str, world_size: int) -> float:
    """nccl-tests' bus bandwidth factor: 2(n-1)/n for all-reduce, (n-1)/n for all-gather
    and reduce-scatter (doc/PERFORMANCE.md, "Summary")."""
    n = world_size
    if n < 1:
        raise ValueError(f"world size {n} < 1")
    if collective == "all_reduce":
        return 2 * (n - 1) / n
    if collective in ("all_gather", "reduce_scatter"):
        return (n - 1) / n
    raise ValueError(f"unknown collective {collective!r}; one of {COLLECTIVES}")


def default_sizes(max_bytes: int, min_bytes: int = DEFAULT_MIN_BYTES) -> list[int]:
    """Powers of 2 from `min_bytes` to `max_bytes` (both rounded down to a power of 2)."""
    lo = 1 << max(0, int(min_bytes).bit_length() - 1)
    hi = 1 << max(0, int(max_bytes).bit_length() - 1)
    if hi < lo:
        raise UserError(f"largest size {max_bytes} B is under the smallest {min_bytes} B")
    sizes = []
    s = lo
    while s <= hi:
        sizes.append(s)
        s *= 2
    return sizes


_UNITS = {"": 1, "B": 1, "K": 2**10, "KB": 10**3, "KIB": 2**10, "M": 2**20, "MB": 10**6,
          "MIB": 2**20, "G": 2**30, "GB": 10**9, "GIB": 2**30}


def parse_size(text: str) -> int:
    """'1MiB' -> 1048576, '64K' -> 65536, '1GB' -> 10**9, '4096' -> 4096. K/M/G and
    KiB/MiB/GiB are powers of 2; KB/MB/GB powers of 10."""
    raw = text.strip().replace(" ", "")
    num = raw.rstrip("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ")
    unit = raw[len(num):].upper()
    try:
        value = float(num)
    except ValueError:
        raise UserError(f"size {text!r}: expected a number with an optional unit "
                        "(B, KiB, MiB, GiB, KB, MB, GB)") from None
    if unit not in _UNITS or value <= 0 or not math.isfinite(value):
        raise UserError(f"size {text!r}: expected a positive number with an optional unit "
                        "(B, KiB, MiB, GiB, KB, MB, GB)")
    return int(value * _UNITS[unit])


# ---------------------------------------------------------------- results


@dataclass(frozen=True)
class CollectivePoint:
    collective: str
    size_bytes: int  # S of nccl-tests: the total array (see the module docstring)
    time_s: float  # median over samples of the slowest rank's time per call
    algbw_bytes_per_s: float  # size_bytes / time_s
    busbw_bytes_per_s: float  # algbw x busbw_factor(collective, world_size)
    samples: int
    calls_per_sample: int


@dataclass
class CommCeilings:
    topology: dict[str, Any]  # dist.topology.topology() on rank 0
    key: dict[str, Any]  # what the cache is keyed on (topology_key, less log-only vars)
    world_size: int
    backend: str
    dtype: str
    points: list[CollectivePoint]
    measured_at: str
    calibrate_s: float
    notes: list[str] = field(default_factory=list)
    source: str = "measured"  # "measured" | "cache"
    schema_version: int = SCHEMA_VERSION

    def curve(self, collective: str) -> list[CollectivePoint]:
        return sorted((p for p in self.points if p.collective == collective),
                      key=lambda p: p.size_bytes)

    def busbw_at(self, collective: str, size_bytes: float) -> float:
        """The measured bus bandwidth of `collective` at `size_bytes` (nccl-tests' S),
        linear in log(size) between the two measured sizes around it; below the smallest
        or above the largest measured size, that end's figure (a collective larger than
        the sweep is assumed to run at the largest size's rate, which is near the
        asymptote from ~256 MiB up on NVLink)."""
        curve = self.curve(collective)
        if not curve:
            raise KeyError(f"no {collective} measurement in these ceilings")
        return _interp_log(size_bytes, [(p.size_bytes, p.busbw_bytes_per_s) for p in curve])

    def time_at(self, collective: str, size_bytes: float) -> float:
        """Seconds one `collective` of `size_bytes` takes at the interpolated rate."""
        algbw = self.busbw_at(collective, size_bytes) / busbw_factor(collective,
                                                                      self.world_size)
        return size_bytes / algbw

    def peak_busbw(self, collective: str) -> float:
        return max(p.busbw_bytes_per_s for p in self.curve(collective))

    def datasheet(self) -> Any:
        """The link's datasheet entry (datasheet.InterconnectEntry) or None."""

        names = self.topology.get("gpu_names") or []
        if not names:
            return None
        return datasheet.lookup_interconnect(names[0], str(self.topology.get("link_type")))

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["schema"] = "gobrrr.comm_ceilings"
        entry = self.datasheet()
        d["datasheet"] = None if entry is None else {
            "name": entry.name, "link_type": entry.link_type,
            "bytes_per_s_bidirectional": entry.bytes_per_s_bidirectional,
            "bytes_per_s_per_direction": entry.bytes_per_s_per_direction,
            "compare": "busbw is one direction: compare it to bytes_per_s_per_direction",
            "source": entry.source,
        }
        return d

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> CommCeilings:
        known = set(cls.__dataclass_fields__)
        kw = {k: v for k, v in d.items() if k in known}
        kw["points"] = [CollectivePoint(**p) for p in d["points"]]
        return cls(**kw)


def _interp_log(x: float, pts: Sequence[tuple[float, float]]) -> float:
    """y at x, linear in log(x) between the points (sorted by x), clamped at the ends."""
    if x <= pts[0][0]:
        return pts[0][1]
    if x >= pts[-1][0]:
        return pts[-1][1]
    for (x0, y0), (x1, y1) in zip(pts, pts[1:], strict=False):
        if x0 <= x <= x1:
            t = (math.log(x) - math.log(x0)) / (math.log(x1) - math.log(x0))
            return y0 + t * (y1 - y0)
    raise AssertionError("unreachable: x lies within the points")


# ---------------------------------------------------------------- process group


def ensure_process_group(timeout_s: float = 300.0) -> bool:
    """Initialise the default process group from torchrun's environment when it is not
    yet: NCCL on CUDA (the device set from LOCAL_RANK first), gloo on CPU; every
    collective gets `timeout_s`. True when this call created it (the caller destroys it).
    Without torchrun's WORLD_SIZE, a UserError saying how to start it."""
    import torch
    import torch.distributed as dist

    if not dist.is_available():
        raise UserError("this torch build has no torch.distributed")
    if dist.is_initialized():
        return False
    if "WORLD_SIZE" not in os.environ:
        raise UserError("--distributed needs torchrun: run `torchrun --nproc-per-node N "
                        "-m gobrrr calibrate --distributed`, or give --nproc-per-node N")

    keep_stdout_for_results()  # NCCL's own prints stay out of rank 0's --json
    backend = "gloo"
    if torch.cuda.is_available():
        backend = "nccl"
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
    dist.init_process_group(backend, timeout=_dt.timedelta(seconds=timeout_s))
    return True


# ---------------------------------------------------------------- measurement


def _ops() -> dict[str, Callable[..., Any]]:
    import torch.distributed as dist

    # torch 2.13 renames the tensor forms (*_single); 2.11 has only the old names.
    ag = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
    rs = getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor
    return {"all_reduce": dist.all_reduce, "all_gather": ag, "reduce_scatter": rs}


def _buffers(collective: str, size_bytes: int, n: int, device: Any
             ) -> tuple[Callable[[], Any], int]:
    """The call that runs `collective` once at (about) `size_bytes`, and its exact S:
    the total array rounded down to n equal per-rank parts of whole fp32 elements."""
    import torch

    per_rank = size_bytes // (_ELEM_BYTES * n)
    if per_rank < 1:
        raise UserError(f"size {size_bytes} B is under one fp32 element per rank for "
                        f"{n} ranks; use sizes of at least {_ELEM_BYTES * n} B")
    total = per_rank * n
    op = _ops()[collective]
    # Zeros: a sum of zeros stays zero over any number of calls (random values summed
    # 2x per all-reduce would overflow to inf after ~128 calls); what a link moves does
    # not depend on the values.
    if collective == "all_reduce":
        buf = torch.zeros(total, device=device)
        return (lambda: op(buf)), total * _ELEM_BYTES
    if collective == "all_gather":
        src, out = torch.zeros(per_rank, device=device), torch.empty(total, device=device)
        return (lambda: op(out, src)), total * _ELEM_BYTES
    src, out = torch.zeros(total, device=device), torch.empty(per_rank, device=device)
    return (lambda: op(out, src)), total * _ELEM_BYTES


class _Clock:
    """Times `calls` back-to-back calls after a barrier: CUDA events on CUDA (the work is
    queued, the host returns early), perf_counter on CPU."""

    def __init__(self, device: Any) -> None:
        import torch

        self.cuda = device.type == "cuda"
        self.torch = torch
        if self.cuda:
            self.start = torch.cuda.Event(enable_timing=True)
            self.end = torch.cuda.Event(enable_timing=True)

    def per_call_s(self, fn: Callable[[], Any], calls: int) -> float:
        import torch.distributed as dist

        dist.barrier()
        if self.cuda:
            self.torch.cuda.synchronize()
            self.start.record()
            for _ in range(calls):
                fn()
            self.end.record()
            self.end.synchronize()
            return float(self.start.elapsed_time(self.end)) / 1e3 / calls
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        return (time.perf_counter() - t0) / calls


def _agreed_plan(probe_s: float, device: Any, point_budget_s: float, min_sample_s: float,
                 max_samples: int) -> tuple[int, int]:
    """(samples, calls per sample), decided on rank 0 from the slowest rank's probe and
    broadcast, so that every rank issues exactly the same collectives."""
    import torch
    import torch.distributed as dist

    t = torch.tensor([probe_s], dtype=torch.float64, device=device)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    slowest = max(float(t.item()), 1e-7)
    calls = max(1, min(1000, math.ceil(min_sample_s / slowest)))
    samples = max(3, min(max_samples, int(point_budget_s / (calls * slowest))))
    plan = torch.tensor([samples, calls], dtype=torch.int64, device=device)
    dist.broadcast(plan, src=0)
    return int(plan[0].item()), int(plan[1].item())


def measure_collectives(
    sizes_bytes: Iterable[int],
    collectives: Sequence[str] = COLLECTIVES,
    *,
    point_budget_s: float = 0.1,
    max_samples: int = 25,
    progress: Progress | None = None,
) -> CommCeilings:
    """Time each collective at each size on the default process group (which must exist:
    `ensure_process_group`). Every rank must call this with the same arguments.

    `point_budget_s` is the time aimed at per (collective, size); each point gets at least
    3 samples. Returns the same CommCeilings on every rank (each sample's time is the
    maximum over ranks, shared by an all-reduce).
    """
    import torch
    import torch.distributed as dist


    say = progress or (lambda _m: None)
    for c in collectives:
        busbw_factor(c, 1)  # unknown names fail here, before any collective
    t_start = time.perf_counter()
    n = dist.get_world_size()
    backend = str(dist.get_backend())
    device = (torch.device("cuda", torch.cuda.current_device()) if backend == "nccl"
              else torch.device("cpu"))
    # Samples of >= 1 ms on CUDA keep the barrier's skew between ranks (microseconds)
    # small against a sample of 1 KiB collectives (~10 us each on NVLink).
    min_sample_s = 1e-3 if device.type == "cuda" else 5e-3
    clock = _Clock(device)
    sizes = sorted(set(int(s) for s in sizes_bytes))
    points: list[CollectivePoint] = []
    for collective in collectives:
        say(f"{collective} on {n} ranks ({backend}): {len(sizes)} sizes, {sizes[0]} B to "
            f"{sizes[-1]} B")
        for size in sizes:
            fn, s_bytes = _buffers(collective, size, n, device)
            # Two untimed calls: the first of a shape sets up NCCL's buffers and channels.
            fn()
            fn()
            samples, calls = _agreed_plan(clock.per_call_s(fn, 1), device, point_budget_s,
                                          min_sample_s, max_samples)
            times = torch.tensor([clock.per_call_s(fn, calls) for _ in range(samples)],
                                 dtype=torch.float64, device=device)
            dist.all_reduce(times, op=dist.ReduceOp.MAX)
            t = _median(times.tolist())
            algbw = s_bytes / t
            points.append(CollectivePoint(
                collective=collective, size_bytes=s_bytes, time_s=t,
                algbw_bytes_per_s=algbw,
                busbw_bytes_per_s=algbw * busbw_factor(collective, n),
                samples=samples, calls_per_sample=calls))
            del fn
    if device.type == "cuda":
        torch.cuda.empty_cache()
    topo = topology()
    notes = []
    if n > int(topo.get("local_world_size", n)):
        notes.append(f"{n} ranks span nodes: the figures are the slowest link's (the "
                     "network), and the topology is rank 0's node")
    return CommCeilings(
        topology=topo, key=_cache_key(topo), world_size=n, backend=backend, dtype="fp32",
        points=points,
        measured_at=_dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        calibrate_s=time.perf_counter() - t_start, notes=notes)


def _median(values: Sequence[float]) -> float:
    """The median, the mean of the middle two for an even count (torch's median would
    take the lower one)."""
    v = sorted(values)
    mid = len(v) // 2
    return v[mid] if len(v) % 2 else (v[mid - 1] + v[mid]) / 2


# ---------------------------------------------------------------- cache


def _cache_key(topo: Mapping[str, Any]) -> dict[str, Any]:

    key = topology_key(topo)
    key["nccl_env"] = {k: v for k, v in key["nccl_env"].items()
                       if k not in _LOG_ONLY_NCCL_VARS}
    key["schema_version"] = SCHEMA_VERSION
    return key


def cache_path(key: Mapping[str, Any]) -> Path:
    """In hardware.py's cache folder ($XDG_CACHE_HOME/gobrrr), one file per key."""

    digest = hashlib.sha1(json.dumps(key, sort_keys=True).encode()).hexdigest()[:16]
    return cache_dir() / f"comm-{key['backend']}-{digest}.json"


def _read(path: Path, notes: list[str]) -> CommCeilings | None:

    data = read_cache(path, SCHEMA_VERSION, notes)
    if data is None:
        return None
    try:
        validate(dict(data, datasheet=None), "comm_ceilings")
    except SchemaError as exc:
        notes.append(f"cache {path} invalid ({' '.join(str(exc).split())[:200]}); "
                     "re-measuring")
        return None
    ceil = CommCeilings.from_dict(data)
    ceil.source = "cache"
    ceil.notes = [f"from cache {path} (measured {ceil.measured_at}); --force re-measures"]
    return ceil


def _write(path: Path, ceil: CommCeilings, notes: list[str]) -> None:

    data = ceil.to_dict()
    data.pop("datasheet", None)
    data["notes"] = []
    write_cache(path, data, notes)


def load_cached(topo: Mapping[str, Any] | None = None) -> CommCeilings | None:
    """The cached ceilings for this topology (default: `topology()` in this process,
    which reads the process group's backend and world size when it exists), or None."""

    return _read(cache_path(_cache_key(topo if topo is not None else topology())), [])


def lookup_busbw(collective: str, size_bytes: float,
                 ceilings: CommCeilings | None = None) -> float | None:
    """The measured bus bandwidth ceiling (bytes/s) of `collective` at `size_bytes`
    (nccl-tests' S: the all-gather's output, the reduce-scatter's input), interpolated in
    log size; from `ceilings`, else this topology's cache; None when neither exists."""
    ceil = ceilings if ceilings is not None else load_cached()
    if ceil is None or not ceil.curve(collective):
        return None
    return ceil.busbw_at(collective, size_bytes)


def calibrate_distributed(
    sizes_bytes: Iterable[int],
    collectives: Sequence[str] = COLLECTIVES,
    *,
    force: bool = False,
    point_budget_s: float = 0.1,
    progress: Progress | None = None,
) -> CommCeilings:
    """`gobrrr calibrate --distributed`: the cached ceilings when they cover these sizes
    and collectives (rank 0 decides, every rank follows), else measured; rank 0 writes
    the cache. Returns the same ceilings on every rank."""
    import torch.distributed as dist


    sizes = sorted(set(int(s) for s in sizes_bytes))
    rank = dist.get_rank()
    notes: list[str] = []
    payload: list[Any] = [None]
    if rank == 0 and not force:
        path = cache_path(_cache_key(topology()))
        cached = _read(path, notes)
        n = dist.get_world_size()
        if cached is not None:
            have = {(p.collective, p.size_bytes) for p in cached.points}
            want = {(c, _buffers_size(s, n)) for c in collectives for s in sizes}
            if want <= have:
                cached.points = [p for p in cached.points
                                 if (p.collective, p.size_bytes) in want]
                payload = [cached.to_dict()]
            else:
                notes.append(f"cache {path} lacks some sizes or collectives; re-measuring")
    dist.broadcast_object_list(payload, src=0)
    if payload[0] is not None:
        return CommCeilings.from_dict(dict(payload[0]))
    ceil = measure_collectives(sizes, collectives, point_budget_s=point_budget_s,
                               progress=progress)
    if rank == 0:
        _write(cache_path(ceil.key), ceil, notes)
    ceil.notes = notes + ceil.notes
    return ceil


def _buffers_size(size_bytes: int, n: int) -> int:
    """The S that `_buffers` times for a requested size (n equal fp32 parts)."""
    return size_bytes // (_ELEM_BYTES * n) * n * _ELEM_BYTES
