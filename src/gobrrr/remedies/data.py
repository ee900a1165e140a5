"""The input pipeline's remedies: a DataLoader's `num_workers`, `pin_memory`,
`persistent_workers`, `prefetch_factor`, and moving the per-sample transform to the
GPU. Advice only: gobrrr never rebuilds the user's DataLoader (its dataset, sampler and
collate are theirs); each is predicted from the measured wait (run.DataLoading, in the
budget as Budget.data_loading_s) and its snippet is written with the loader's own
arguments, read from the object (`LoaderFacts`).

With T the step's T_wall, L the mean wait inside `__next__` (host), E the part of it the
device sat idle (all of L on CPU), W workers:
- num_workers (now 0): W processes each load a whole batch in about L, together W
  batches per L, while the main process runs the rest of the step, T - E: the step
  becomes max(T - E, L / W), saved T - max(T - E, L / W). Approximate: the batches'
  trip through shared memory is not counted, and on CPU the workers take cores from the
  step's own ops (an upper bound there).
- pin_memory (CUDA, now False): the batch's host-to-device copies from pageable memory
  (the profiled steps' `Memcpy HtoD (Pageable -> Device)`) block the host while they are
  staged; from pinned memory with `non_blocking=True` they do not. At most their time is
  saved (an upper bound: a copy the next op waits for stays).
- persistent_workers (workers > 0, not persistent): each epoch starts its workers again;
  the first batch of each iterator waited F where the others waited the median m: saved
  per step (F - m) / (batches per epoch).
- prefetch_factor (workers > 0 and the wait is exposed): more batches in flight absorb
  the slow ones, not the mean: saved the steps' waits above their median, mean(L_i) -
  median(L_i) per step, at most E.
- the transform on the GPU (CUDA, workers > 0 and still exposed, or one CPU): the
  decoding stays on the host, the augmentation runs batched on the GPU; its share of L
  is not measured, so E is an upper bound of the saving and the prediction says so.
"""

from __future__ import annotations

import os
import statistics
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from gobrrr.gains import Gain, gain_from_saved
from gobrrr.remedies.base import STAGE_MUTATE, Candidate, Context, RemedySpec
from gobrrr.units import fmt_s

__all__ = ["SPECS", "LoaderFacts", "loader_facts", "usable_cpus", "suggested_workers",
           "MAX_SUGGESTED_WORKERS"]

# More workers than this rarely help one GPU's step and each holds a dataset copy and a
# CUDA-free Python process (a few hundred MB): the suggestion stops here.
MAX_SUGGESTED_WORKERS = 8


@dataclass(frozen=True)
class LoaderFacts:
    """A DataLoader's arguments as the object holds them (the user's own), and what it
    loads: enough to write the snippet for their loader."""

    dataset: str  # the dataset's class name
    batch_size: int | None
    shuffle: bool  # its sampler is a RandomSampler
    num_workers: int
    pin_memory: bool
    persistent_workers: bool
    prefetch_factor: int | None  # None with 0 workers (DataLoader's rule)
    drop_last: bool
    custom_collate: bool  # a collate_fn other than torch's default
    batches: int | None  # len(loader), None where the dataset has no length

    def arguments(self, **changed: Any) -> str:
        """`DataLoader(...)`'s arguments as the user would write them, with `changed`."""
        args: dict[str, Any] = {"batch_size": self.batch_size}
        if self.shuffle:
            args["shuffle"] = True
        if self.drop_last:
            args["drop_last"] = True
        if self.num_workers:
            args["num_workers"] = self.num_workers
        if self.pin_memory:
            args["pin_memory"] = True
        if self.persistent_workers:
            args["persistent_workers"] = True
        if self.num_workers and self.prefetch_factor not in (None, 2):
            args["prefetch_factor"] = self.prefetch_factor
        args |= changed
        collate = ", collate_fn=collate_fn" if self.custom_collate else ""
        body = ", ".join(f"{k}={v!r}" for k, v in args.items())
        return f"DataLoader(dataset, {body}{collate})  # dataset: your {self.dataset}"


def loader_facts(loader: Any) -> LoaderFacts:
    """Read a torch DataLoader's arguments (nothing is called but len())."""
    from torch.utils.data import RandomSampler
    from torch.utils.data._utils.collate import default_collate

    try:
        batches: int | None = len(loader)
    except TypeError:  # an IterableDataset without __len__
        batches = None
    return LoaderFacts(
        dataset=type(loader.dataset).__name__, batch_size=loader.batch_size,
        shuffle=isinstance(getattr(loader, "sampler", None), RandomSampler),
        num_workers=int(loader.num_workers), pin_memory=bool(loader.pin_memory),
        persistent_workers=bool(loader.persistent_workers),
        prefetch_factor=loader.prefetch_factor, drop_last=bool(loader.drop_last),
        custom_collate=loader.collate_fn is not default_collate, batches=batches)


def usable_cpus() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # macOS, Windows
        return os.cpu_count() or 1


def suggested_workers(cpus: int | None = None) -> int:
    """One worker per CPU the main process leaves, up to MAX_SUGGESTED_WORKERS."""
    return max(1, min(MAX_SUGGESTED_WORKERS, (cpus or usable_cpus()) - 1))


def _loader(ctx: Context) -> LoaderFacts | None:
    return ctx.loaders[0] if ctx.loaders else None


def _waits(ctx: Context) -> tuple[float, float, float] | None:
    """(T, L, E) of the module docstring, where a wait was measured."""
    b, dl = ctx.budget, ctx.data_loading
    if b is None or dl is None or b.data_loading_s is None or b.total_s <= 0:
        return None
    return b.total_s, dl.host_s, b.data_loading_s


def _exposed(ctx: Context) -> str | None:
    """Why no DataLoader remedy applies (None: one may)."""
    if _loader(ctx) is None:
        return "no DataLoader seen"
    w = _waits(ctx)
    if w is None:
        return "no wait for data measured"
    if w[2] <= 0:
        return "the wait for data never left the device idle"
    return None


def _gain(ctx: Context, saved_s: float, basis: str) -> Gain:
    assert ctx.budget is not None
    return gain_from_saved(ctx.budget, {"overhead": saved_s}, basis)


# --- num_workers -------------------------------------------------------------------


def _workers_applies(ctx: Context) -> str | None:
    if (why := _exposed(ctx)) is not None:
        return why
    lf = _loader(ctx)
    assert lf is not None
    if lf.num_workers > 0:
        return f"num_workers={lf.num_workers} already"
    return None if usable_cpus() > 1 else "one CPU: no core for a worker"


def _workers_predict(ctx: Context) -> Gain:
    w = _waits(ctx)
    if w is None:
        return Gain.none("no wait for data measured")
    t, load, exposed = w
    n = suggested_workers()
    rest = t - exposed
    new_t = max(rest, load / n)
    cpu = ("; on CPU the workers take cores from the step's own ops: an upper bound"
           if ctx.device == "cpu" else "")
    workers = "1 worker loads 1 batch" if n == 1 else f"{n} workers load {n} batches"
    basis = (f"{workers} per {fmt_s(load)} while the step's other "
             f"{fmt_s(rest)} runs: T_wall {fmt_s(t)} -> max({fmt_s(rest)}, "
             f"{fmt_s(load)}/{n}) = {fmt_s(new_t)} (approximate: the batches' trip "
             f"through shared memory is not counted{cpu})")
    return _gain(ctx, t - new_t, basis)


def _workers_snippet(ctx: Context) -> str:
    lf = _loader(ctx)
    n = suggested_workers()
    if lf is None:
        return f"DataLoader(dataset, ..., num_workers={n}, persistent_workers=True)"
    extra: dict[str, Any] = {"num_workers": n, "persistent_workers": True}
    if ctx.device == "cuda" and not lf.pin_memory:
        extra["pin_memory"] = True
    return f"loader = {lf.arguments(**extra)}"


# --- pin_memory ------------------------------------------------------------------------

PAGEABLE_COPY = "Pageable -> Device"


def _pageable_copies_s(ctx: Context) -> float:
    b = ctx.budget
    return sum(k.duration_s for k in (b.kernels if b is not None else [])
               if PAGEABLE_COPY in k.name)


def _pin_applies(ctx: Context) -> str | None:
    if ctx.device != "cuda":
        return "CPU: nothing is copied to a device"
    if _loader(ctx) is None:
        return "no DataLoader seen"
    lf = _loader(ctx)
    assert lf is not None
    if lf.pin_memory:
        return "pin_memory=True already"
    return None if _pageable_copies_s(ctx) > 0 else \
        "no copy from pageable host memory in the profiled steps"


def _pin_predict(ctx: Context) -> Gain:
    copies = _pageable_copies_s(ctx)
    if ctx.budget is None or copies <= 0:
        return Gain.none("no pageable host-to-device copy measured")
    basis = (f"{fmt_s(copies)} a step of host-to-device copies from pageable memory "
             "(staged, the host blocked); from pinned memory with non_blocking=True they "
             "overlap: at most that saved (an upper bound)")
    return _gain(ctx, min(copies, ctx.budget.overhead_s), basis)


def _pin_snippet(ctx: Context) -> str:
    lf = _loader(ctx)
    loader = lf.arguments(pin_memory=True) if lf else "DataLoader(..., pin_memory=True)"
    return (f"loader = {loader}\n"
            "# and in the loop: batch = batch.to('cuda', non_blocking=True)")


# --- persistent_workers ------------------------------------------------------------------


def _persistent_applies(ctx: Context) -> str | None:
    lf = _loader(ctx)
    if lf is None:
        return "no DataLoader seen"
    if lf.num_workers == 0:
        return "no workers to keep (num_workers=0)"
    if lf.persistent_workers:
        return "persistent_workers=True already"
    dl = ctx.data_loading
    if dl is None or not dl.first_batch_s:
        return "no epoch started inside the measured steps"
    return None


def _persistent_predict(ctx: Context) -> Gain:
    lf, dl = _loader(ctx), ctx.data_loading
    if lf is None or dl is None or not dl.first_batch_s or not dl.per_step_s:
        return Gain.none("no epoch start measured")
    if not lf.batches:
        return Gain.none("the loader has no length: batches per epoch unknown")
    first = statistics.median(dl.first_batch_s)
    typical = statistics.median(dl.per_step_s)
    saved = max(0.0, first - typical) / lf.batches
    basis = (f"each epoch's first batch waited {fmt_s(first)} (workers starting), the "
             f"others {fmt_s(typical)} (median): {fmt_s(first - typical)} over "
             f"{lf.batches} batches an epoch, {fmt_s(saved)} a step")
    return _gain(ctx, saved, basis)


def _persistent_snippet(ctx: Context) -> str:
    lf = _loader(ctx)
    return (f"loader = {lf.arguments(persistent_workers=True)}" if lf else
            "DataLoader(..., persistent_workers=True)")


# --- prefetch_factor ------------------------------------------------------------------


def _prefetch_applies(ctx: Context) -> str | None:
    if (why := _exposed(ctx)) is not None:
        return why
    lf = _loader(ctx)
    assert lf is not None
    return None if lf.num_workers > 0 else "no workers to prefetch (num_workers=0)"


def _prefetch_predict(ctx: Context) -> Gain:
    dl, w = ctx.data_loading, _waits(ctx)
    if dl is None or w is None or len(dl.per_step_s) < 3:
        return Gain.none("too few steps' waits to read their spread")
    spikes = statistics.fmean(dl.per_step_s) - statistics.median(dl.per_step_s)
    basis = (f"the waits above their median (mean {fmt_s(statistics.fmean(dl.per_step_s))}"
             f", median {fmt_s(statistics.median(dl.per_step_s))}): more batches in "
             "flight absorb slow batches, not the mean rate")
    return _gain(ctx, min(max(0.0, spikes), w[2]), basis)


def _prefetch_snippet(ctx: Context) -> str:
    lf = _loader(ctx)
    now = (lf.prefetch_factor or 2) if lf else 2
    return (f"loader = {lf.arguments(prefetch_factor=now * 2)}" if lf else
            "DataLoader(..., prefetch_factor=4)")


# --- the transform on the GPU -------------------------------------------------------------


def _gpu_applies(ctx: Context) -> str | None:
    if ctx.device != "cuda":
        return "CPU: no GPU to move the transform to"
    if (why := _exposed(ctx)) is not None:
        return why
    lf = _loader(ctx)
    assert lf is not None
    if lf.num_workers == 0 and usable_cpus() > 1:
        return "workers first (num_workers=0): they parallelize the transform as it is"
    return None


def _gpu_predict(ctx: Context) -> Gain:
    w = _waits(ctx)
    if w is None:
        return Gain.none("no wait for data measured")
    basis = (f"the GPU idles {fmt_s(w[2])} a step waiting for data; the transform's share "
             "of it is not measured: an upper bound")
    return _gain(ctx, w[2], basis)


def _gpu_snippet(ctx: Context) -> str:
    return ("# keep decoding in the dataset; apply the augmentation to the whole batch "
            "on the GPU:\nbatch = transform(batch.to('cuda', non_blocking=True))")


def _never(cand: Candidate, ctx: Context) -> Candidate:
    raise RuntimeError("DataLoader remedies are advice only: gobrrr never rebuilds a loader")


def _spec(name: str, applies: Callable[[Context], str | None],
          predict: Callable[[Context], Gain], snippet_for: Callable[[Context], str],
          title: str, how: str) -> RemedySpec:
    return RemedySpec(name, "data", "overhead", STAGE_MUTATE, name, applies, predict,
                      _never, snippet_for(Context("cpu")), title=title, how=how,
                      advice_only=True, snippet_for=snippet_for)


SPECS = [
    _spec("dataloader_workers", _workers_applies, _workers_predict, _workers_snippet,
          "DataLoader worker processes (num_workers)",
          "load batches in worker processes while the step runs"),
    _spec("dataloader_pin_memory", _pin_applies, _pin_predict, _pin_snippet,
          "pinned host memory (pin_memory)",
          "pin the batches and copy them with non_blocking=True"),
    _spec("dataloader_persistent_workers", _persistent_applies, _persistent_predict,
          _persistent_snippet, "keep the workers between epochs (persistent_workers)",
          "keep the DataLoader's workers alive between epochs"),
    _spec("dataloader_prefetch", _prefetch_applies, _prefetch_predict, _prefetch_snippet,
          "more batches in flight (prefetch_factor)",
          "raise prefetch_factor so slow batches do not stall the step"),
    _spec("transform_on_gpu", _gpu_applies, _gpu_predict, _gpu_snippet,
          "the transform on the GPU",
          "run the batch's augmentation on the GPU, after the copy"),
]
