"""This machine's ceilings, measured, never assumed (nanoGPT's hard-coded 312e12 is the
anti-pattern): dense matmul FLOP/s per dtype, memory bandwidth, the rate of element-wise
math (exp and a row softmax, elements/s per dtype), eager per-op cost, Python's scalar
op rate and (CPU) a compiled call's host cost (compile_cost.py). Cached per machine
fingerprint; a cache file that does not match ceilings.schema.json (or holds a NaN or
infinity) is re-measured and overwritten.

Element-wise math (`exp_elems_per_s`, `softmax_elems_per_s`). The roofline credits a
softmax with 5 FLOPs per element (counting.py) against the fp32 FMA peak: tens of TFLOP/s
on a GPU, so its FLOP term is always far under its bytes term and the roofline calls it
memory-bound. What a softmax really executes per element is more: a bf16 load and
conversion to fp32, max, subtract, exp (a range reduction and a polynomial, or the special
function unit, and its conversions), sum, divide, conversion and store, over two or three
passes of the row. An op whose *instruction* throughput is the limit runs below its
bandwidth roof with its cores busy (the issue this answers: on an H200, softmax over bf16
attention scores took 60% of the time at 27% of DRAM bandwidth, SM 77% busy).
So the rate is measured, not derived from a FLOP count: torch.exp and a row softmax
(`aten::_softmax.out`, rows of `_MATH_ROW` elements, as attention scores are) over tensors
past the caches, best sample (as the bandwidth probes: a roof is the best the machine
does). An op's *math floor* is then its elements / the rate of its kind and dtype
(budget.py). The figure needs no model of the instructions, and it includes whatever limits
the kernel at saturation (instruction issue, the special function units, its passes over
the row). Its bytes/s (elements x 2 x itemsize: read once, written once) against the
measured bandwidth says which limit the probe met: well below the bandwidth it met the
instruction bound; near the bandwidth it met the bandwidth, and then its math floor is no
more than the op's bytes floor, so it cannot make an op instruction-bound (budget.py's rule
needs the math floor to exceed the bytes floor by a margin). Seen on this project's 2-core
CPU (torch 2.13): exp 1.1 G elem/s fp32 (9 GB/s), softmax 0.6 G elem/s fp32 (5 GB/s), bf16
alike, against ~50 GB/s of bandwidth: both instruction-bound; the rates at 2^24 and 2^26
elements agreed within 10%, as math-bound probes should whether or not caches hold them.

Every measurement runs on random data: matmuls run measurably faster on zeros or other
predictable data, whose fewer toggling bits draw less power and so throttle the clocks
less (Horace He, https://www.thonking.ai/p/strangely-matrix-multiplications).
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import hashlib
import json
import math
import os
import platform
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from gobrrr import datasheet
from gobrrr.compile_cost import compiled_call_costs
from gobrrr.errors import first_line
from gobrrr.schema import SchemaError, validate
from gobrrr.settings import tf32
from gobrrr.timing import measure

__all__ = [
    "Ceilings",
    "read_cache",
    "write_cache",
    "calibrate",
    "fingerprint",
    "cache_dir",
    "cached_for",
    "SCHEMA_VERSION",
]

# 2: bandwidth_by_kernel and bandwidth_kernel; the CPU roof from kernels of known traffic
# (1 was a CPU copy_ that left out its write-allocate read).
# 3: exp_elems_per_s and softmax_elems_per_s (element-wise math, the module docstring);
# a cache of 1 or 2 lacks them and is re-measured.
SCHEMA_VERSION = 3
# The element-wise math probes and what each moves per element: read once, written once.
MATH_KINDS = ("exp", "softmax")
_MATH_ROW = 4096  # softmax row length: attention scores of 4096-token sequences
Progress = Callable[[str], None]
_ITEMSIZE = {"fp32": 4, "bf16": 2, "fp16": 2}


@dataclass
class Ceilings:
    device: str  # "cpu" or "cuda"
    fingerprint: dict[str, str]
    peak_flops_per_s: dict[str, float]  # dense matmul, by dtype name: bf16 fp16 tf32 fp32
    # The memory roof: the best of bandwidth_by_kernel (see _cpu_bandwidths for the CPU
    # method; on CUDA a large device copy, bytes read + written).
    bandwidth_bytes_per_s: float
    op_overhead_s: float  # eager cost of one tiny op (dispatch + launch)
    python_ops_per_s: float  # Python float additions per second
    measured_at: str
    calibrate_s: float
    details: dict[str, Any] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    # Each bandwidth probe's bytes/s ("sum", "add_", "copy_"), kept for the record, and the
    # one that set bandwidth_bytes_per_s (None: hand-made ceilings, no probe).
    bandwidth_by_kernel: dict[str, float] = field(default_factory=dict)
    bandwidth_kernel: str | None = None
    # Element-wise math at saturation, elements/s by dtype name (fp32 bf16 fp16): torch.exp
    # and a row softmax (rows of details["math_row"]) past the caches (module docstring).
    # Empty: not measured (hand-made or datasheet ceilings).
    exp_elems_per_s: dict[str, float] = field(default_factory=dict)
    softmax_elems_per_s: dict[str, float] = field(default_factory=dict)
    source: str = "measured"  # "measured" | "cache" | "datasheet" (analyze: not measured here)
    schema_version: int = SCHEMA_VERSION
    # The host cost of a torch.compile'd call besides its kernels (compile_cost.py): per
    # call with one input, and per further tensor the graph reads. None: not measured
    # (CUDA for now, a cache written before them, or a machine that cannot compile).
    compiled_call_s: float | None = None
    compiled_tensor_s: float | None = None

    @property
    def roof_kind(self) -> str:
        """How the ceilings were had, for sentences: "measured", or "datasheet" (a trace
        from a GPU this machine has not calibrated, gobrrr analyze)."""
        return "datasheet" if self.source == "datasheet" else "measured"

    def vector_flops_per_s(self) -> float:
        """Ceiling for non-matmul math (pointwise, reductions): the fp32 rate without
        tensor cores. NB: the fp32 matmul rate counts an FMA as 2 FLOPs; pointwise ops
        that do not fuse multiply-adds reach about half of it, so this roof is optimistic
        for them by up to 2x."""
        return self.peak_flops_per_s["fp32"]

    def math_elems_per_s(self, kind: str, dtype: str) -> float | None:
        """The calibrated rate of element-wise math of `kind` ("exp" or "softmax") in
        `dtype`, elements/s; None when it was not measured."""
        rates = {"exp": self.exp_elems_per_s, "softmax": self.softmax_elems_per_s}[kind]
        return rates.get(dtype)

    def math_bytes_per_s(self, kind: str, dtype: str) -> float | None:
        """The bytes/s the math probe of `kind` moved in `dtype` (read once, written once):
        against the bandwidth, which limit the probe met (module docstring)."""
        rate = self.math_elems_per_s(kind, dtype)
        size = _ITEMSIZE.get(dtype)
        return None if rate is None or size is None else rate * 2 * size

    def ridge_flops_per_byte(self, dtype: str) -> float:
        return self.peak_flops_per_s[dtype] / self.bandwidth_bytes_per_s

    def datasheet_entry(self) -> datasheet.DatasheetEntry | None:
        if self.device != "cuda":
            return None
        return datasheet.lookup(self.fingerprint.get("name", ""))

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        entry = self.datasheet_entry()
        if entry is not None:
            d["datasheet"] = {
                "name": entry.name,
                "peak_flops_per_s": entry.peak_flops_per_s,
                "bandwidth_bytes_per_s": entry.bandwidth_bytes_per_s,
                "source": entry.source,
            }
        else:
            d["datasheet"] = None
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Ceilings:
        known = {f for f in cls.__dataclass_fields__}
        return cls(**{k: v for k, v in d.items() if k in known})


# ---------------------------------------------------------------- fingerprint and cache


def _cpu_name() -> str:
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or platform.machine()


def fingerprint(device: str) -> dict[str, str]:
    """What makes measurements comparable: device, driver/runtime, torch version."""
    import torch

    fp = {"device": device, "torch": torch.__version__, "python": platform.python_version()}
    if device == "cuda":
        idx = torch.cuda.current_device()
        props = torch.cuda.get_device_properties(idx)
        fp["name"] = torch.cuda.get_device_name(idx)
        fp["capability"] = f"{props.major}.{props.minor}"
        fp["cuda_runtime"] = str(torch.version.cuda)
        get_driver = getattr(torch._C, "_cuda_getDriverVersion", None)
        if get_driver is not None:
            with contextlib.suppress(Exception):
                fp["cuda_driver"] = str(get_driver())
    else:
        fp["name"] = _cpu_name()
        fp["machine"] = platform.machine()
        fp["threads"] = str(torch.get_num_threads())
    return fp


def cache_dir() -> Path:
    """$XDG_CACHE_HOME/gobrrr, else ~/.cache/gobrrr."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "gobrrr"


def machine_key(fp: dict[str, str]) -> str:
    """A short hash of a fingerprint: one machine and software stack in file names."""
    return hashlib.sha1(json.dumps(fp, sort_keys=True).encode()).hexdigest()[:16]


def _cache_path(fp: dict[str, str]) -> Path:
    return cache_dir() / f"ceilings-{fp['device']}-{machine_key(fp)}.json"


def _non_finite(value: Any, where: str = "") -> str | None:
    """The path of the first NaN or infinity in a JSON value (Python's json reads them),
    or None. JSON Schema cannot reject them: NaN compares false with every bound."""
    if isinstance(value, float) and not math.isfinite(value):
        return where or "(top level)"
    items: Any = (value.items() if isinstance(value, dict)
                  else enumerate(value) if isinstance(value, list) else ())
    for key, item in items:
        found = _non_finite(item, f"{where}/{key}" if where else str(key))
        if found is not None:
            return found
    return None


# What a measured ceiling can be on any machine of today or the next decade, by wide
# margins: a cached value outside them is a corrupt or doctored file (a cached fp32 peak
# of 1e-300 or a bandwidth of 1e30 was used as measured, and flipped ops' regimes).
PLAUSIBLE = {
    "flops_per_s": (1e6, 1e17),  # a microcontroller .. 100 PFLOP/s on one device
    "bytes_per_s": (1e6, 1e14),  # 1 MB/s .. 100 TB/s
    "elems_per_s": (1e5, 1e15),
    "op_overhead_s": (1e-8, 1e-1),  # 10 ns .. 100 ms for one tiny eager op
    "python_ops_per_s": (1e3, 1e10),
    "compiled_s": (0.0, 1e-1),  # a compiled call's host cost, or one tensor's share of it
}


def _implausible(data: dict[str, Any]) -> str | None:
    """The first measured figure outside PLAUSIBLE, in words, or None."""
    checks: list[tuple[str, Any, str]] = [
        *((f"peak_flops_per_s/{k}", v, "flops_per_s")
          for k, v in (data.get("peak_flops_per_s") or {}).items()),
        ("bandwidth_bytes_per_s", data.get("bandwidth_bytes_per_s"), "bytes_per_s"),
        *((f"bandwidth_by_kernel/{k}", v, "bytes_per_s")
          for k, v in (data.get("bandwidth_by_kernel") or {}).items()),
        *((f"{kind}_elems_per_s/{k}", v, "elems_per_s") for kind in MATH_KINDS
          for k, v in (data.get(f"{kind}_elems_per_s") or {}).items()),
        ("op_overhead_s", data.get("op_overhead_s"), "op_overhead_s"),
        ("python_ops_per_s", data.get("python_ops_per_s"), "python_ops_per_s"),
        ("compiled_call_s", data.get("compiled_call_s"), "compiled_s"),
        ("compiled_tensor_s", data.get("compiled_tensor_s"), "compiled_s"),
    ]
    for where, value, kind in checks:
        lo, hi = PLAUSIBLE[kind]
        if isinstance(value, (int, float)) and not lo <= value <= hi:
            return f"{where} is {value:g}, outside what any machine measures ({lo:g}-{hi:g})"
    return None


def _cache_problem(data: Any, device: str) -> str | None:
    """Why a cache file's contents cannot be used, in one line, or None when they can.

    The file is checked against ceilings.schema.json (the datasheet entry, looked up rather
    than measured, is not stored), then for NaN and infinity: a bandwidth of 0, a string
    where a number belongs or a negative peak would otherwise crash or mislead every run.
    """

    try:
        validate(dict(data, datasheet=None), "ceilings")
    except SchemaError as exc:
        return " ".join(str(exc).split())[:300]
    bad = _non_finite(data)
    if bad is not None:
        return f"{bad} is not a finite number"
    # The schema lets these be 0 (datasheet ceilings have no such figure); a measured one
    # never is, and both are divided by.
    for key in ("op_overhead_s", "python_ops_per_s"):
        if data[key] <= 0:
            return f"{key} is {data[key]}, not a positive number"
    if data["device"] != device:
        return f"device {data['device']!r}, not {device!r}"
    return _implausible(data)


def read_cache(path: Path, schema_version: int, notes: list[str]) -> dict[str, Any] | None:
    """A cache file's JSON when it is readable and of `schema_version`; else None, with a
    note saying why it is re-measured (none when there is no file). The one reader of
    gobrrr's caches (these ceilings, dist/ceilings.py's communication ceilings)."""
    if not path.exists():
        return None
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        notes.append(f"cache {path} unreadable ({type(exc).__name__}); re-measuring")
        return None
    if not isinstance(data, dict):
        notes.append(f"cache {path} invalid (a JSON {type(data).__name__}, not an object); "
                     "re-measuring")
        return None
    if data.get("schema_version") != schema_version:
        notes.append(f"cache {path} is from another gobrrr version; re-measuring")
        return None
    return data


def write_cache(path: Path, data: dict[str, Any], notes: list[str]) -> None:
    """Write a cache file whole or not at all (a temporary file per process, renamed:
    ranks of one job reading it never see half a file); a note when it cannot be."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".tmp{os.getpid()}")
        tmp.write_text(json.dumps(data, indent=2))
        tmp.replace(path)
    except OSError as exc:
        notes.append(f"could not write cache {path} ({exc.strerror or exc}); results not cached")


def _load_cache(path: Path, device: str, notes: list[str]) -> Ceilings | None:
    data = read_cache(path, SCHEMA_VERSION, notes)
    if data is None:
        return None
    problem = _cache_problem(data, device)
    if problem is not None:
        notes.append(f"cache {path} invalid ({problem}); re-measuring")
        return None
    ceil = Ceilings.from_dict(data)
    ceil.source = "cache"
    ceil.notes = [f"from cache {path} (measured {ceil.measured_at}); --force re-measures"]
    return ceil


def cached_for(device: str, name: str) -> Ceilings | None:
    """The newest calibration cached on this machine for a device of this name (any torch
    or driver version), or None: what `gobrrr analyze` uses for a trace recorded on the
    same GPU model. Unreadable or invalid cache files are skipped."""
    found = []
    for path in cache_dir().glob(f"ceilings-{device}-*.json"):
        ceil = _load_cache(path, device, [])
        if ceil is not None and ceil.fingerprint.get("name") == name:
            found.append(ceil)
    return max(found, key=lambda c: c.measured_at) if found else None


def _save_cache(path: Path, ceil: Ceilings, notes: list[str]) -> None:
    data = ceil.to_dict()
    data.pop("datasheet", None)
    data["notes"] = []
    write_cache(path, data, notes)


# ---------------------------------------------------------------- measurements


def _matmul_flops_per_s(device: str, dtype_name: str, n: int, budget_s: float) -> float:
    import torch

    torch_dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(dtype_name, torch.float32)
    gen = torch.Generator(device=device).manual_seed(0)  # our own generator: user RNG untouched
    a = torch.randn(n, n, device=device, dtype=torch_dtype, generator=gen)
    b = torch.randn(n, n, device=device, dtype=torch_dtype, generator=gen)
    out = torch.empty(n, n, device=device, dtype=torch_dtype)
    with tf32(dtype_name == "tf32") if device == "cuda" else contextlib.nullcontext():
        # 0.3 s of warm-up lets the GPU reach its steady clocks; 20 ms samples amortize
        # the synchronize around each sample to well under 1%.
        t = measure(lambda: torch.mm(a, b, out=out), device=device, budget_s=budget_s,
                    warmup_s=min(0.3, budget_s / 4), min_samples=10, min_sample_s=0.02,
                    max_rel_iqr=0.02)
    # 2*n^3: one multiply and one add per term of each of the n^2 dot products.
    return 2 * n**3 / t.median_s


def _copy_bandwidth(device: str, nbytes: int, budget_s: float) -> float:
    import torch

    gen = torch.Generator(device=device).manual_seed(1)
    src = torch.randn(nbytes // 4, device=device, generator=gen)
    dst = torch.empty_like(src)
    t = measure(lambda: dst.copy_(src), device=device, budget_s=budget_s,
                warmup_s=min(0.3, budget_s / 4), min_samples=10, min_sample_s=0.02,
                max_rel_iqr=0.02)
    # A copy reads every byte once and writes it once.
    return 2 * nbytes / t.median_s


# ------------------------------------------------ CPU bandwidth: kernels of known traffic
#
# A CPU copy_ alone is a poor roof. Its byte count (read src + write dst) leaves out the
# write-allocate read: a store to a line not in cache first reads that line, so the copy
# moves 3x the tensor's bytes while 2x is counted, and reads as two thirds of what the
# memory did. And a tensor that fits the last-level cache times the cache, not DRAM. On a
# 2-core VM whose sysfs reports a 300 MiB L3, an in-place add_ ran at ~130 GB/s over
# 64 MiB and ~52 GB/s from 256 MiB up, while version 1's 256 MiB copy_ read ~33 GB/s:
# pointwise ops showed 130-313% of "the" bandwidth.
#
# So the CPU bandwidth is timed with three kernels whose traffic is known, over a tensor
# at least 4x the last-level cache (a VM gets at most what sysfs reports, often less):
#   sum    read-only reduction          bytes = 1x the tensor
#   add_   in-place read-modify-write   bytes = 2x (each line read once, written back once)
#   copy_  read src, write dst          bytes = 3x (src read, dst write-allocate read, dst
#                                       write: PyTorch's CPU copy uses ordinary stores,
#                                       it runs at the rate of a mul(out=) of equal traffic)
# The roof is the best of the three: a roof is the best the machine does (the roofline
# model's convention); an op's fraction of it then says how well the op spends memory.
# Which kernel wins depends on the machine: on the VM above sum reached only ~60% of
# add_'s bytes/s (a core's reads are capped by the misses it keeps in flight, and
# write-backs come on top of them), and add_ and copy_ came within noise of each other.
# An op that writes a fresh output, like mul(out=), pays a write-allocate read its byte
# count leaves out and sits near 2/3 of the roof at best: that shortfall is real, and
# the op's own.

_BLOCK_BYTES = 2**20  # the random block the probe tensor repeats; sizes are multiples of it
_DEFAULT_LLC_BYTES = 32 * 2**20  # when neither sysfs nor sysconf says
_MIN_PROBE_BYTES = 2**28  # 256 MiB: at least what version 1 timed
_MAX_PROBE_BYTES = 2**31  # 2 GiB per tensor; the copy holds two


def _parse_cache_size(text: str) -> int:
    """sysfs cache sizes: '48K', '2048K', '32M', or plain bytes."""
    t = text.strip().upper()
    scale = {"K": 2**10, "M": 2**20, "G": 2**30}.get(t[-1:], 1)
    return int(t[:-1] if scale > 1 else t) * scale


def _llc_bytes(sysfs: Path = Path("/sys/devices/system/cpu/cpu0/cache")) -> tuple[int, str]:
    """(size of the last-level cache, where the figure came from): the highest-level data
    or unified cache in sysfs, else sysconf's L3/L2, else a 32 MiB default."""
    best: tuple[int, int] = (0, 0)  # (level, size)
    for index in sorted(sysfs.glob("index*")):
        try:
            if (index / "type").read_text().strip() == "Instruction":
                continue
            level = int((index / "level").read_text())
            size = _parse_cache_size((index / "size").read_text())
        except (OSError, ValueError):
            continue
        best = max(best, (level, size))
    if best[1] > 0:
        return best[1], f"sysfs L{best[0]}"
    for name in ("SC_LEVEL3_CACHE_SIZE", "SC_LEVEL2_CACHE_SIZE"):
        with contextlib.suppress(ValueError, OSError):
            size = os.sysconf(name)
            if size > 0:
                return size, f"sysconf {name}"
    return _DEFAULT_LLC_BYTES, "default (cache size unknown)"


def _phys_mem_bytes() -> int:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return 16 * 2**30


def _cpu_probe_bytes(llc_bytes: int, phys_mem_bytes: int) -> int:
    """Tensor size for the CPU bandwidth probes: 4x the last-level cache, at least 256 MiB,
    at most 2 GiB and 1/16 of physical memory (the copy holds two tensors: 1/8 in all),
    rounded down to whole random blocks."""
    want = max(4 * llc_bytes, _MIN_PROBE_BYTES)
    size = min(want, _MAX_PROBE_BYTES, phys_mem_bytes // 16)
    return max(_BLOCK_BYTES, size // _BLOCK_BYTES * _BLOCK_BYTES)


def _cpu_bandwidths(nbytes: int, budget_s: float) -> dict[str, float]:
    """Bytes/s of sum, add_ and copy_ over an fp32 tensor of `nbytes` (a multiple of
    1 MiB), each counted with its true traffic (see the comment above)."""
    import torch

    gen = torch.Generator().manual_seed(1)
    # Random values, tiled from one 1 MiB block: DRAM traffic does not depend on the
    # values, and randn over GiBs would cost seconds on a small CPU.
    block = torch.rand(_BLOCK_BYTES // 4, generator=gen)
    src = torch.empty(nbytes // 4)
    src.view(-1, block.numel()).copy_(block)
    dst = torch.empty_like(src)

    def timed(fn: Callable[[], Any]) -> float:
        # The best sample, as STREAM reports its best time: another process on a shared
        # core only ever slows a sample down, and a roof is the best the machine does.
        return measure(fn, device="cpu", budget_s=budget_s, warmup_s=min(0.3, budget_s / 4),
                       min_samples=7, min_sample_s=0.02, max_rel_iqr=0.02).min_s

    return {
        "sum": nbytes / timed(lambda: torch.sum(src)),
        "add_": 2 * nbytes / timed(lambda: src.add_(1e-3)),
        "copy_": 3 * nbytes / timed(lambda: dst.copy_(src)),
    }


# ------------------------------------------------ element-wise math (module docstring)


def _math_elems_per_s(device: str, dtype_name: str, n_elems: int, budget_s: float
                      ) -> dict[str, float]:
    """{kind: elements/s} of torch.exp and of a row softmax (rows of _MATH_ROW) over
    `n_elems` random elements of `dtype_name`, written into a preallocated output (on a
    CPU a fresh output would time the OS's page faults: examples.pointwise). The best
    sample: the highest rate, so the lowest math floor an op can be held to."""
    import torch

    torch_dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(dtype_name,
                                                                        torch.float32)
    gen = torch.Generator(device=device).manual_seed(3)
    # Random values in the range attention scores take, tiled from one block (randn over
    # GiBs costs seconds on a small CPU; the math does not depend on the repetition).
    assert n_elems % _MATH_ROW == 0, "whole softmax rows"
    block = torch.randn(min(_MATH_ROW * 64, n_elems), device=device,
                        generator=gen).to(torch_dtype)
    x = torch.empty(n_elems, device=device, dtype=torch_dtype)
    x.view(-1, block.numel()).copy_(block)
    out = torch.empty_like(x)
    rows, rows_out = x.view(-1, _MATH_ROW), out.view(-1, _MATH_ROW)
    probes: dict[str, Callable[[], Any]] = {
        "exp": lambda: torch.exp(x, out=out),
        "softmax": lambda: torch.ops.aten._softmax.out(rows, -1, False, out=rows_out),
    }
    rates = {}
    for kind in MATH_KINDS:
        t = measure(probes[kind], device=device, budget_s=budget_s,
                    warmup_s=min(0.1, budget_s / 4), min_samples=5, min_sample_s=0.02,
                    max_rel_iqr=0.02)
        rates[kind] = n_elems / t.min_s
    return rates


def _math_rates(device: str, dtypes: tuple[str, ...], n_elems: int, budget_s: float,
                progress: Progress, errors: dict[str, str]
                ) -> dict[str, dict[str, float]]:
    """{kind: {dtype: elements/s}} for every MATH_KINDS probe. A dtype whose kernels the
    device lacks (RuntimeError) is left out, never recorded as 0, and its error goes to
    `errors` (the ceilings' details say it)."""
    rates: dict[str, dict[str, float]] = {k: {} for k in MATH_KINDS}
    for dtype in dtypes:
        progress(f"{' and '.join(MATH_KINDS)} {dtype} over {n_elems / 2**20:.0f} M elements")
        try:
            for kind, rate in _math_elems_per_s(device, dtype, n_elems, budget_s).items():
                rates[kind][dtype] = rate
        except RuntimeError as exc:
            errors[dtype] = str(exc).strip().splitlines()[0][:200] if str(exc) else "error"
    return rates


def _op_overhead_s(device: str, budget_s: float) -> float:
    import torch

    s = torch.randn(1, device=device, generator=torch.Generator(device=device).manual_seed(2))
    n_ops = 100

    def loop() -> None:
        for _ in range(n_ops):
            s.add_(1.0)

    t = measure(loop, device=device, budget_s=budget_s, max_rel_iqr=0.05)
    return t.median_s / n_ops


def _python_ops_per_s(budget_s: float) -> float:
    n = 100_000

    def loop() -> float:
        x = 0.0
        for _ in range(n):
            x = x + 1.0
        return x

    t = measure(loop, device="cpu", budget_s=budget_s)
    return n / t.median_s


def _cpu_bf16_runs() -> bool:
    import torch

    try:
        a = torch.randn(8, 8, dtype=torch.bfloat16)
        torch.mm(a, a)
        return True
    except RuntimeError:
        return False


def _compiled_costs(device: str, details: dict[str, Any], progress: Progress
                    ) -> tuple[float | None, float | None]:
    """compile_cost.compiled_call_costs on CPU (on CUDA not measured yet, nor used by a
    prediction); (None, None) where it cannot compile, the error kept in `details`."""
    if device != "cpu":
        return None, None
    progress("a compiled call's host cost (torch.compile of two tiny functions)")
    try:
        return compiled_call_costs(device, budget_s=0.5)
    except Exception as exc:  # no C++ compiler, a Python Dynamo does not support...
        details["compiled_call_error"] = first_line(exc, 200)
        return None, None


def _with_compiled_costs(ceil: Ceilings, path: Path, progress: Progress,
                         notes: list[str]) -> Ceilings:
    """A CPU cache written before the compiled call's costs were calibrated gets them
    measured now (a few seconds, once) and saved, rather than a re-measure of every roof
    or predictions that lack them until `--force`."""
    if (ceil.device != "cpu" or ceil.compiled_call_s is not None
            or "compiled_call_error" in ceil.details):
        return ceil
    details = dict(ceil.details)
    call_s, tensor_s = _compiled_costs(ceil.device, details, progress)
    done = replace(ceil, compiled_call_s=call_s, compiled_tensor_s=tensor_s,
                   details=details)
    _save_cache(path, done, notes)
    return done


def _measure(device: str, progress: Progress) -> Ceilings:
    import torch

    t_start = time.perf_counter()
    details: dict[str, Any] = {}
    peaks: dict[str, float] = {}
    if device == "cuda":
        # 8192^3: large enough to fill every SM for many waves on an H100/H200.
        n = 8192
        for name in ("bf16", "fp16", "tf32", "fp32"):
            progress(f"matmul {name} {n}x{n}x{n}")
            peaks[name] = _matmul_flops_per_s(device, name, n, budget_s=1.5)
        details["matmul_n"] = n
        copy_bytes = 2**30  # 1 GiB: far beyond L2, so DRAM bandwidth is what is timed
        progress(f"copy bandwidth, {copy_bytes / 2**20:.0f} MiB")
        by_kernel = {"copy_": _copy_bandwidth(device, copy_bytes, budget_s=2.0)}
        details["copy_bytes"] = copy_bytes
    else:
        # 1024^3 fp32 on a 2-core machine is ~20-50 ms per call: measurable in a budget.
        n = 1024
        progress(f"matmul fp32 {n}x{n}x{n}")
        peaks["fp32"] = _matmul_flops_per_s(device, "fp32", n, budget_s=3.0)
        if _cpu_bf16_runs():
            progress(f"matmul bf16 {n}x{n}x{n}")
            peaks["bf16"] = _matmul_flops_per_s(device, "bf16", n, budget_s=3.0)
        details["matmul_n"] = n
        llc, llc_source = _llc_bytes()
        probe_bytes = _cpu_probe_bytes(llc, _phys_mem_bytes())
        progress(f"bandwidth: sum, add_, copy_ over {probe_bytes / 2**20:.0f} MiB "
                 f"(last-level cache {llc / 2**20:.0f} MiB)")
        by_kernel = _cpu_bandwidths(probe_bytes, budget_s=1.5)
        details.update(llc_bytes=llc, llc_source=llc_source, bandwidth_bytes=probe_bytes,
                       bandwidth_traffic={"sum": 1, "add_": 2, "copy_": 3})
        if probe_bytes < 4 * llc:
            details["bandwidth_note"] = (
                f"probe tensor {probe_bytes / 2**20:.0f} MiB is under 4x the last-level "
                f"cache ({llc / 2**20:.0f} MiB): capped by memory; cache may lift the roof")
    math_errors: dict[str, str] = {}
    if device == "cuda":
        # 2^28 elements: 512 MiB in bf16 and fp16, 1 GiB in fp32, per tensor: far past
        # any GPU's L2 (50 MiB on an H200); ~0.1-1 ms per call.
        math_n = 2**28
        rates = _math_rates(device, ("fp32", "bf16", "fp16"), math_n, 0.25, progress,
                            math_errors)
    else:
        # 2^24 elements (64 MiB fp32 per tensor): ~15-30 ms per call at the ~1 G elem/s
        # a 2-core CPU does, ~1.5 s for the four probes with their tensors. Not past
        # every last-level cache (a VM may report 300 MiB), and it need not be: both
        # kinds run at a tenth of the CPU's bandwidth (module docstring), math-bound, and
        # 2^26 elements (512 MiB read + written) changed the rates by under 10%, at 3x the
        # time. A cache could only make the rate higher, the math floor lower: an op is
        # never called instruction-bound for a rate the memory could not feed.
        math_n = 2**24
        dtypes = ("fp32", "bf16") if "bf16" in peaks else ("fp32",)
        rates = _math_rates(device, dtypes, math_n, 0.2, progress, math_errors)
    details.update(math_elems=math_n, math_row=_MATH_ROW)
    if math_errors:
        details["math_errors"] = math_errors
    kernel = max(by_kernel, key=lambda k: by_kernel[k])
    progress("eager per-op cost (add_ on 1 element)")
    op_s = _op_overhead_s(device, budget_s=1.0)
    progress("Python scalar additions")
    py = _python_ops_per_s(budget_s=1.0)
    call_s, tensor_s = _compiled_costs(device, details, progress)
    if device == "cuda":
        torch.cuda.empty_cache()
    return Ceilings(
        device=device,
        fingerprint=fingerprint(device),
        peak_flops_per_s=peaks,
        bandwidth_bytes_per_s=by_kernel[kernel],
        op_overhead_s=op_s,
        python_ops_per_s=py,
        measured_at=_dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        calibrate_s=time.perf_counter() - t_start,
        details=details,
        bandwidth_by_kernel=by_kernel,
        bandwidth_kernel=kernel,
        exp_elems_per_s=rates["exp"],
        softmax_elems_per_s=rates["softmax"],
        compiled_call_s=call_s,
        compiled_tensor_s=tensor_s,
    )


def calibrate(
    device: str = "cpu", *, force: bool = False, progress: Progress | None = None
) -> Ceilings:
    """This machine's ceilings for `device` ("cpu" or "cuda"), from the cache when present.

    A corrupt or invalid cache is re-measured and overwritten, with a note; an unwritable
    cache dir only loses the cache.
    """
    if device not in ("cpu", "cuda"):
        raise ValueError(f"unknown device {device!r}; expected 'cpu' or 'cuda'")
    notes: list[str] = []
    fp = fingerprint(device)
    path = _cache_path(fp)
    if not force:
        cached = _load_cache(path, device, notes)
        if cached is not None and cached.fingerprint != fp:
            # the file at this machine's path names another machine (copied, or edited):
            # its figures are not this machine's
            notes.append(f"cache {path} was measured on {cached.fingerprint.get('name')!r}"
                         f", not this {fp.get('name')!r}; re-measuring")
            cached = None
        if cached is not None:
            cached = _with_compiled_costs(cached, path, progress or (lambda _msg: None),
                                          notes)
            loaded = _loaded_note(cached)
            if loaded:
                cached.notes = [*cached.notes, loaded]
            return cached
    from gobrrr.contention import watch_cpu

    with watch_cpu() as seen:
        ceil = _measure(device, progress or (lambda _msg: None))
    load = seen[0]
    ceil.details["load"] = load.to_dict()  # the conditions it was measured in, cached
    _save_cache(path, ceil, notes)
    loaded = _loaded_note(ceil)
    ceil.notes = notes + ceil.notes + ([loaded] if loaded else [])
    return ceil


def _loaded_note(ceil: Ceilings) -> str | None:
    """A note when the calibration ran while other processes held the cores torch's
    threads needed (contention.Contention.contended): its roofs may read low."""
    load = ceil.details.get("load") or {}
    if not load.get("contended"):
        return None
    return (f"the calibration of {ceil.measured_at} ran while other processes kept "
            f"{load.get('other_cores', 0):.1f} of {load.get('cores')} cores busy: its roofs "
            "may read low (an op above one has it re-measured); `gobrrr calibrate "
            "--force` on a quieter machine measures them again")


BANDWIDTH = "bandwidth"  # remeasure's name for the memory roof (the others: matmul dtypes)


def remeasure(ceil: Ceilings, which: set[str], progress: Progress | None = None
              ) -> tuple[Ceilings, dict[str, tuple[float, float]]]:
    """`which` of `ceil`'s roofs ("bandwidth", or a matmul dtype of peak_flops_per_s)
    measured again, with calibrate's own probes: each keeps the better of the two (a
    calibration taken under load reads low; a roof is the best the machine does), and
    the cache is rewritten with the best. Returns the ceilings and {roof: (before,
    after)} of what was re-measured; `details["remeasured"]` keeps it too."""
    say = progress or (lambda _m: None)
    peaks = dict(ceil.peak_flops_per_s)
    by_kernel = dict(ceil.bandwidth_by_kernel)
    changes: dict[str, tuple[float, float]] = {}
    n = int(ceil.details.get("matmul_n", 8192 if ceil.device == "cuda" else 1024))
    for unit in sorted(which & set(peaks)):
        say(f"re-measuring the {unit} matmul peak ({n}x{n}x{n})")
        got = _matmul_flops_per_s(ceil.device, unit, n,
                                  budget_s=1.5 if ceil.device == "cuda" else 3.0)
        changes[unit] = (peaks[unit], max(peaks[unit], got))
        peaks[unit] = max(peaks[unit], got)
    if BANDWIDTH in which:
        say("re-measuring the bandwidth")
        if ceil.device == "cuda":
            fresh = {"copy_": _copy_bandwidth("cuda", int(ceil.details.get("copy_bytes",
                                                                          2**30)), 2.0)}
        else:
            nbytes = int(ceil.details.get("bandwidth_bytes", _MIN_PROBE_BYTES))
            fresh = _cpu_bandwidths(nbytes, budget_s=1.5)
        for k, v in fresh.items():
            by_kernel[k] = max(by_kernel.get(k, 0.0), v)
        best = max(by_kernel, key=lambda k: by_kernel[k])
        changes[BANDWIDTH] = (ceil.bandwidth_bytes_per_s,
                              max(ceil.bandwidth_bytes_per_s, by_kernel[best]))
    details = dict(ceil.details)
    stamp = _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")
    details["remeasured"] = {**details.get("remeasured", {}),
                             **{k: {"before": a, "after": b, "at": stamp}
                                for k, (a, b) in changes.items()}}
    kernel = max(by_kernel, key=lambda k: by_kernel[k]) if by_kernel else None
    new = replace(ceil, peak_flops_per_s=peaks, details=details,
                  bandwidth_by_kernel=by_kernel, bandwidth_kernel=kernel or
                  ceil.bandwidth_kernel,
                  bandwidth_bytes_per_s=max(ceil.bandwidth_bytes_per_s,
                                            by_kernel.get(kernel, 0.0) if kernel else 0.0))
    notes: list[str] = []
    if ceil.source in ("measured", "cache"):
        _save_cache(_cache_path(ceil.fingerprint), new, notes)
    return new, changes
