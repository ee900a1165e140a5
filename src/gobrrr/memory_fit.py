"""The batch that fits (issue 26, item 2, first part): one step's memory (memory.py) at
the workload's batch and at twice it, read as bytes that do not grow with the batch and
bytes per sample (a straight line through the two peaks, each category apart), then the
largest batch whose predicted peak fits in the memory this process can use.

- Capacity on CUDA: the device's free memory (torch.cuda.mem_get_info) plus what this
  process's allocator already reserves, which the step would reuse. On CPU: the
  kernel's MemAvailable plus the base workload's resident state (its parameters,
  buffers and optimizer state, already in this process): approximate, said so.
- Checked on CUDA by running the predicted batch (a factory target: built at that batch;
  otherwise its inputs repeated) and the next size up, which should fail; an
  out-of-memory there is the expected answer, any other failure is said. When the
  predicted batch itself runs out of memory (seen on the H200: GPT-2 small training
  at 512 tokens, 165 predicted from batches 8 and 16, out of memory in a 15.8 GiB logits
  allocation: the allocator's fragmentation at tensors that large), the batches between
  the larger measured one and it are bisected, at most BISECT_RUNS runs, and the largest
  that ran is the answer (`largest_ran`), measured rather than predicted. Not checked on
  CPU: running out of memory there is the kernel killing the process, not an exception.
Linear in the batch is an assumption (attention's memory grows with sequence length
squared, not with the batch; allocator rounding adds steps): the report says so.

- The next call at the edge (CUDA). A step that runs once can fail on its second call:
  seen on the H200 with TinyLlama inference at 2048 tokens, batch 1001 predicted from
  the line, whose warm call ran and whose measured call failed allocating the 122 GiB
  bf16 logits with 9.8 GiB free; batches up to 547 ran, 563 did not. The caching
  allocator keeps the first call's blocks; near the edge the first call had to release
  its cache to fit its largest tensor, so the cache then holds mostly that one block,
  the second call's smaller tensors are carved out of it, and its largest tensor needs
  a second block of its size. So on CUDA the peak a batch must fit is the line's peak
  plus the largest storage one op allocates (memory.py's `largest_allocation_bytes`,
  itself a line through the two batches): GPT-2 small training at 512 tokens, 1.49 GB
  + 851 MB per sample and 103 MB per sample of fp32 logits, fills the 139.1 GiB at
  batch 155 (151 within HEADROOM_CUDA), where 152 ran and 155 failed (the line alone:
  165 within HEADROOM). This is the worst
  case (a batch far from the edge never releases its cache and reuses its blocks
  call after call), so the prediction errs low: by the tensors that end up inside the
  old block (TinyLlama's final hidden state, 8 MB per sample of 270). With
  `PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True` the allocator maps a block from
  pages wherever they are free, and the line alone would hold (not yet measured).
- HEADROOM_CUDA of the capacity on CUDA (the allocator's reserve at the edge is the term
  above; what remains is outside tensors: cuBLAS's 32 MiB workspace per handle, two
  in a training step whose backward runs on another thread, cuDNN's workspaces,
  rounding; 35-170 MB on the H200 rows); HEADROOM elsewhere (CPU, approximate anyway).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

from gobrrr.memory import MemoryProfile, measure_memory
from gobrrr.workload import Workload, call_factory

__all__ = ["MemoryFit", "fit_batch", "capacity_bytes", "child_probe", "HEADROOM",
           "HEADROOM_CUDA", "REUSE_NOTE",
           "check_sizes", "bisect_largest", "free_memory", "allocated_bytes", "is_oom",
           "child_memory", "ChildFailed", "at_batch"]

Probe = Callable[[int], int]  # batch -> its step's peak bytes (raises when it cannot run)

HEADROOM = 0.95  # of the capacity a predicted peak may use (allocator rounding, caches)
HEADROOM_CUDA = 0.98  # the batch fit on CUDA, whose allocator reserve is modeled (above)
BISECT_RUNS = 6  # runs spent finding the largest batch that runs when the predicted fails
# Seen on the H200: after batches 165 and 182 ran out of memory, batch 55 (49 GB
# predicted of 139 GiB) did too. Memory still allocated past this after a failed run
# stops the bisection, and the report says so.
HELD_LIMIT_BYTES = 256 * 2**20
LINEAR_NOTE = ("approximate: peak bytes taken as linear in the batch from two batches "
               "(allocator rounding and anything not proportional to the batch make "
               "steps)")
REUSE_NOTE = ("CUDA: each batch's peak counted with its largest tensor twice (the next "
              "call at the edge of memory cannot reuse the cached block the first left: "
              "the worst case, so the batch predicted errs low; "
              "expandable_segments:True would lift it)")


@dataclass
class MemoryFit:
    batches: list[int]
    peaks_bytes: list[int]
    fixed_bytes: float  # the peak's part that does not grow with the batch
    per_sample_bytes: float  # what one more sample adds to the peak
    per_sample_by_category: dict[str, float]
    capacity_bytes: int | None
    capacity_source: str
    predicted_max_batch: int | None
    checked: dict[str, Any] | None = None  # CUDA: what running it gave
    notes: list[str] = field(default_factory=list)
    largest_allocations_bytes: list[int] = field(default_factory=list)  # at `batches`
    largest_fixed_bytes: float = 0.0  # the largest allocation's line, CUDA's reuse term
    largest_per_sample_bytes: float = 0.0
    headroom: float = HEADROOM  # of capacity_bytes that the predicted peak may use
    line_max_batch: int | None = None  # the line alone, without the reuse term

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _meminfo_available() -> int | None:
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


def capacity_bytes(device: str, base: MemoryProfile) -> tuple[int | None, str]:
    """(bytes a step of this process could use, how it was found)."""
    if device == "cuda":
        import torch

        free, total = torch.cuda.mem_get_info()
        reserved = torch.cuda.memory_reserved()
        return int(free + reserved), (f"CUDA free {free / 2**30:.1f} GiB + this process's "
                                      f"reserved {reserved / 2**30:.1f} GiB of "
                                      f"{total / 2**30:.1f} GiB")
    avail = _meminfo_available()
    if avail is None:
        return None, "unknown (no /proc/meminfo)"
    resident = sum(base.by_category[k] for k in ("parameters", "buffers", "optimizer_state"))
    return avail + resident, (f"MemAvailable {avail / 2**30:.1f} GiB + the workload's "
                              f"resident state {resident / 2**30:.2f} GiB (approximate)")


def at_batch(w: Workload, batch: int) -> Workload:
    """`w` at `batch`: a factory's build at that batch, else its inputs repeated (a
    whole number of times its batch, at least once)."""
    if w.factory is not None:
        return call_factory(w.name, w.factory, batch, w.device, w.description)
    assert w.batch_size
    return w.scaled(max(1, batch // w.batch_size))


def is_oom(exc: BaseException | None) -> bool:
    """An out-of-memory error, itself or as the cause of gobrrr's WorkloadError."""
    while exc is not None:
        text = f"{type(exc).__name__}: {exc}".lower()
        if "out of memory" in text or "outofmemory" in text:
            return True
        exc = exc.__cause__
    return False


def fit_batch(w: Workload, *, measure: Callable[[Workload], MemoryProfile] = measure_memory,
              capacity: Callable[[str, MemoryProfile], tuple[int | None, str]] = capacity_bytes,
              check: bool | None = None, probe: Probe | None = None,
              progress: Callable[[str], None] | None = None) -> MemoryFit:
    """The batch that fits (module docstring). `check`: run the predicted batch and the
    next size up (default: on CUDA only). `probe(batch)`: how a check runs a batch (its
    peak bytes, or the exception); default, `measure` in this process; `child_probe`
    runs each in a fresh process."""
    say = progress or (lambda _m: None)
    if not w.batch_size:
        from gobrrr.errors import UserError

        raise UserError(f"{w.name}: no batch size known, so no batch to fit (give a "
                        "factory target, or a tensor argument whose dim 0 is the batch)")
    b1 = w.batch_size
    say(f"memory at batch {b1}")
    p1 = measure(w)
    say(f"memory at batch {2 * b1}")
    p2 = measure(w.scaled(2))
    per = (p2.peak_bytes - p1.peak_bytes) / b1
    fixed = p1.peak_bytes - per * b1
    by_cat = {k: (p2.by_category[k] - p1.by_category[k]) / b1 for k in p1.by_category}
    cap, source = capacity(w.device, p1)
    notes = [LINEAR_NOTE]
    # CUDA's reuse term (module docstring): the largest allocation's own line; it does
    # not shrink with the batch (a largest tensor that does not grow, a weight's
    # gradient, gives a slope of 0)
    l1, l2 = p1.largest_allocation_bytes, p2.largest_allocation_bytes
    reuse = w.device == "cuda"
    l_per = max(0.0, (l2 - l1) / b1) if reuse else 0.0
    l_fixed = l2 - l_per * 2 * b1 if reuse else 0.0
    headroom = HEADROOM_CUDA if reuse else HEADROOM
    if reuse:
        notes.append(REUSE_NOTE)
    predicted = line = None
    if cap is not None and per > 0:
        predicted = max(0, math.floor((headroom * cap - fixed - l_fixed) / (per + l_per)))
        line = max(0, math.floor((headroom * cap - fixed) / per))
    elif per <= 0:
        notes.append("the peak did not grow with the batch here: no largest batch follows "
                     "from these two")
    fit = MemoryFit([b1, 2 * b1], [p1.peak_bytes, p2.peak_bytes], fixed, per, by_cat, cap,
                    source, predicted, None, notes, [l1, l2], l_fixed, l_per, headroom,
                    line)
    if check is None:
        check = w.device == "cuda"
    if check and predicted:
        free_memory(w.device)
        held_here = allocated_bytes(w.device)  # the workload's own, kept in this process
        base = held_here if probe is None else None
        run = probe or (lambda b: measure(at_batch(w, b)).peak_bytes)
        fit.checked = check_sizes(run, w.device, predicted, say)
        if probe is not None and held_here:
            # a fresh process runs beside this one, which keeps its workload (and its
            # own CUDA context): the check has that much less room than the prediction
            fit.checked["beside_bytes"] = held_here
            notes.append(f"the checks ran in fresh processes beside this one, which "
                         f"held {held_here / 2**30:.2f} GiB of tensors and its CUDA "
                         "context: that much less room than the capacity predicted for")
        if fit.checked["predicted"].get("oom"):
            fit.checked["largest_ran"] = bisect_largest(run, w.device, 2 * b1, predicted, say,
                                                 base)
    elif predicted and w.device != "cuda":
        notes.append("not checked by running it: out of memory on a CPU is the kernel "
                     "killing the process, not an exception")
    return fit


def check_sizes(run: Probe, device: str, predicted: int, say: Callable[[str], None],
           unit: str = "batch") -> dict[str, Any]:
    """Run the predicted size, then the next size up (+10%, at least one more). `unit`:
    what the size is ("batch", "seq_len"), the results' key."""
    out: dict[str, Any] = {}
    up = max(predicted + 1, (predicted * 11 + 9) // 10)  # +10%, rounded up, in integers
    for key, size in (("predicted", predicted), ("next_up", up)):
        say(f"checking {unit.replace('_', ' ')} {size}")
        try:
            out[key] = {unit: size, "ran": True, "peak_bytes": run(size)}
        except Exception as exc:  # an OOM is the answer sought; anything else is said
            out[key] = {unit: size, "ran": False, "oom": is_oom(exc),
                        "error": f"{type(exc).__name__}: {str(exc).splitlines()[0][:200]}"}
        finally:
            free_memory(device)
    return out


def bisect_largest(run: Probe, device: str, ran: int, failed: int, say: Callable[[str], None],
            base_bytes: int | None = None, unit: str = "batch") -> dict[str, Any]:
    """The largest batch in [ran, failed) that runs, by bisection: `ran` ran (it was
    measured), `failed` ran out of memory. At most BISECT_RUNS runs; what is left
    between the two is the uncertainty, said in `runs` and `between`."""
    runs = 0
    peak: int | None = None
    held = _held(device, base_bytes)
    if held > HELD_LIMIT_BYTES:
        # memory the failed runs left allocated makes every run below them fail early
        return {unit: ran, "runs": 0, "between": [ran, failed], "held_bytes": held,
                "stopped": f"{held / 2**30:.1f} GiB were still allocated after the "
                           "out-of-memory runs (something kept their tensors): not "
                           "bisected"}
    while failed - ran > 1 and runs < BISECT_RUNS:
        mid = (ran + failed) // 2
        say(f"bisecting: {unit.replace('_', ' ')} {mid}")
        runs += 1
        try:
            peak = run(mid)
            ran = mid
        except Exception as exc:  # an OOM narrows the range; anything else stops it
            if not is_oom(exc):
                free_memory(device)
                return {unit: ran, "runs": runs, "between": [ran, failed],
                        "stopped": f"{type(exc).__name__}: {str(exc).splitlines()[0][:200]}"}
            failed = mid
        finally:
            free_memory(device)
        held = _held(device, base_bytes)
        if held > HELD_LIMIT_BYTES:
            return {unit: ran, "runs": runs, "between": [ran, failed], "peak_bytes": peak,
                    "held_bytes": held,
                    "stopped": f"{held / 2**30:.1f} GiB still allocated after batch "
                               f"{failed} ran out of memory: the largest that ran is a "
                               "lower bound"}
    return {unit: ran, "runs": runs, "between": [ran, failed], "peak_bytes": peak,
            "held_bytes": held}


def _held(device: str, base_bytes: int | None) -> int:
    """What this process still holds beyond `base_bytes` (None: the runs were not in
    this process, so nothing of theirs can be held here)."""
    return 0 if base_bytes is None else max(0, allocated_bytes(device) - base_bytes)


def allocated_bytes(device: str) -> int:
    """CUDA memory allocated now (0 on CPU, where nothing is measured this way)."""
    if device != "cuda":
        return 0
    import torch

    return int(torch.cuda.memory_allocated())


def free_memory(device: str) -> None:
    import gc

    gc.collect()
    if device == "cuda":
        import torch

        torch.cuda.empty_cache()


class ChildFailed(RuntimeError):
    """A check's child process failed; its message is the child's last line."""


def child_memory(target: str, words: list[str], timeout_s: float = 600.0,
                 env: dict[str, str | None] | None = None,
                 what: str = "the run") -> dict[str, Any]:
    """`gobrrr memory TARGET WORDS --json -q` in a fresh process, in this one's
    environment changed by `env` (a value None: the variable removed): its JSON.
    Raises ChildFailed with the child's last line."""
    import json
    import os
    import subprocess
    import sys

    cmd = [sys.executable, "-m", "gobrrr", "memory", target, *words, "--json", "-q"]
    child_env = None
    if env:
        child_env = {k: v for k, v in os.environ.items() if k not in env}
        child_env.update({k: v for k, v in env.items() if v is not None})
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s,
                              env=child_env)
    except subprocess.TimeoutExpired as exc:
        raise ChildFailed(f"{what}: no result within {timeout_s:.0f} s") from exc
    if done.returncode != 0:
        lines = [ln for ln in done.stderr.splitlines() if ln.strip()]
        raise ChildFailed(lines[-1] if lines else f"exit {done.returncode}")
    out: dict[str, Any] = json.loads(done.stdout)
    return out


def child_probe(target: str, device: str, options: list[str],
                timeout_s: float = 600.0, size_flag: str = "--batch-size") -> Probe:
    """Run each checked size as `gobrrr memory TARGET --batch-size B` (or `size_flag`,
    e.g. --seq-len) in a fresh process, whose exit frees whatever it held (in-process, a
    batch that ran out of memory left 83.2 GiB allocated on the H200). `options`: the
    target's other options as command-line words (--seq-len, --dtype, --train, ...)."""

    def run(batch: int) -> int:
        words = [size_flag, str(batch), "--device", device, *options]
        return int(child_memory(target, words, timeout_s, what=f"batch {batch}")
                   ["peak_bytes"])

    return run
