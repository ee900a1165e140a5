"""What the memory buys in time (issue 26, item 3, first part): the step's time per call
and samples/s at today's batch, then at doubling batches up to the batch that fits
(`gobrrr memory TARGET --fit --throughput`, the JSON's `fit.throughput`).

The essay's double-the-batch experiment says why this is the question: a step in the
overhead regime takes about the same time at twice the batch (the host's launches, not
the device's work, set the pace), so doubling the batch nearly doubles samples/s; once
the step has turned compute- or bandwidth-bound, the time doubles with the batch and
samples/s stay where they were. The ladder B, 2B, 4B, ... up to the batch that fits
finds where that happens: the knee, the first doubling whose samples/s gain is under
KNEE_GAIN ("from batch N a doubling buys under 10% more samples/s"), and the gain of
the batch that fits over today's.

- Top of the ladder: the batch the fit predicted, or the largest that ran when the
  check found less (memory_fit's `checked.largest_ran`); the doublings below it, then
  the top itself (4 and 151: 4, 8, 16, 32, 64, 128, 151). Only doublings are read for
  the knee (128 -> 151 is no doubling).
- Timer: gobrrr's own (timing.measure: warm-up, then samples until their spread is
  small or TIME_BUDGET_S is spent), never under a profiler or MemTracker.
- Where: on CUDA, for a target given by name, each batch in a fresh process
  (`python -m gobrrr.memory_throughput SPEC`, the target built again at that batch, as
  the fit's checks run): a batch at the edge that runs out of memory takes what it held
  with it, and no batch is timed beside another's cached blocks. Elsewhere (CPU, or a
  workload given as a Python object) in this process, the user's state restored after
  each batch. On CPU the ladder is short (CPU_RUNGS batches): memory is not the limit
  there the way it is on a GPU (the kernel pages before it refuses), and each rung
  costs seconds of a shared CPU.
- A batch that fails (out of memory, or anything else) ends the ladder there; the
  failure is a rung with its `error`, said, never raised.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

from gobrrr.memory_fit import MemoryFit, at_batch, free_memory, is_oom
from gobrrr.units import fmt_num, fmt_s
from gobrrr.workload import Workload

__all__ = ["Rung", "Throughput", "ladder_batches", "knee_batch", "doublings", "fit_top",
           "throughput_ladder", "time_in_child", "KNEE_GAIN", "CPU_RUNGS", "TIME_BUDGET_S"]

KNEE_GAIN = 1.1  # a doubling that buys less than this x samples/s: the step is bound there
CPU_RUNGS = 4  # on CPU: B, 2B, 4B, 8B (module docstring)
TIME_BUDGET_S = 2.0  # each batch's timing budget: the doctor's default --time-budget
CHILD_TIMEOUT_S = 600.0  # one child: start, build, warm-up, timing
CPU_NOTE = ("CPU: a short ladder in this process; memory is not the limit on a CPU the "
            "way it is on a GPU (the kernel pages before it refuses an allocation), so "
            "the batch that fits is not where this ladder goes")


# batch -> (the batch built, timing.Timing's dict); raises when the batch cannot run.
# The batch built differs only for inputs repeated (a whole number of times the batch).
Timer = Callable[[int], tuple[int, dict[str, Any]]]


@dataclass
class Rung:
    batch: int
    step_s: float | None  # the median time per call (None: the batch did not run)
    samples_per_s: float | None  # batch / step_s
    rel_iqr: float | None = None  # the timing's spread, interquartile range over median
    n_samples: int = 0
    noisy: bool = False  # the spread never fell under the timer's threshold
    error: str | None = None  # why it did not run
    oom: bool = False

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class Throughput:
    rungs: list[Rung]
    fit_batch: int | None  # the batch that fits: the ladder's top (None: none predicted)
    fit_source: str  # how it is known: "predicted", "largest that ran", ...
    knee_batch: int | None  # from this batch a doubling buys under knee_gain more samples/s
    knee_gain: float
    gain_at_fit: float | None  # samples/s at fit_batch over today's (None: not timed there)
    largest_timed_batch: int | None
    gain_at_largest_timed: float | None
    where: str  # "a fresh process per batch" or "this process"
    doublings_timed: int  # batch pairs N, 2N that both ran: what the knee was read from
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["rungs"] = [r.to_dict() for r in self.rungs]
        return d


def ladder_batches(base: int, top: int | None, max_rungs: int | None = None) -> list[int]:
    """B, 2B, 4B, ... while within `top`, then `top` itself when it is no doubling
    (4, 151 -> 4, 8, 16, 32, 64, 128, 151); at most `max_rungs` (CPU: the first ones,
    the top dropped when out of reach). `top` None or at most B: B alone, or the
    doublings up to max_rungs when that is given."""
    if top is None and max_rungs is None:
        return [base]
    limit = max_rungs if max_rungs is not None else sys.maxsize
    out = [base]
    while len(out) < limit and (top is None or out[-1] * 2 <= top):
        out.append(out[-1] * 2)
    if top is not None and top > out[-1] and len(out) < limit:
        out.append(top)
    return out


def doublings(rungs: list[Rung]) -> list[tuple[Rung, Rung]]:
    """The pairs of rungs at batch N and 2N that both ran, in order."""
    return [(lo, hi) for lo, hi in zip(rungs, rungs[1:], strict=False)
            if hi.batch == 2 * lo.batch and lo.samples_per_s and hi.samples_per_s]


def knee_batch(rungs: list[Rung], gain: float = KNEE_GAIN) -> int | None:
    """The first doubling (batch N to 2N, both ran) whose samples/s grew by less than
    `gain`: N (from batch N a doubling buys under gain-1 more samples/s). None: every
    doubling timed bought at least that."""
    for lo, hi in doublings(rungs):
        assert lo.samples_per_s and hi.samples_per_s
        if hi.samples_per_s / lo.samples_per_s < gain:
            return lo.batch
    return None


def fit_top(fit: MemoryFit) -> tuple[int | None, str]:
    """(the batch that fits, how it is known): the largest that ran when the predicted
    one ran out of memory and was bisected, else the predicted."""
    ran = (fit.checked or {}).get("largest_ran")
    if ran and ran.get("batch"):
        return int(ran["batch"]), "largest that ran"
    if fit.predicted_max_batch:
        return fit.predicted_max_batch, "predicted"
    return None, "none predicted"


def _rung(batch: int, timing: dict[str, Any]) -> Rung:
    step = float(timing["median_s"])
    return Rung(batch, step, batch / step if step > 0 else None, timing.get("rel_iqr"),
                int(timing.get("n_samples", 0)), bool(timing.get("noisy", False)))


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0][:200] if text else ''}"


def throughput_ladder(w: Workload, fit: MemoryFit, *, timer: Timer | None = None,
                      budget_s: float | None = None, max_rungs: int | None = None,
                      progress: Callable[[str], None] | None = None) -> Throughput:
    """Time the step at each batch of the ladder (module docstring). `timer(batch)`: how
    a batch is timed (its Timing dict, or the exception); default, a fresh process per
    batch on CUDA for a workload that can be built again (`w.reload`), else this
    process. `budget_s`: each batch's timing budget (default TIME_BUDGET_S).
    `max_rungs`: default CPU_RUNGS on CPU, no limit on CUDA."""
    say = progress or (lambda _m: None)
    budget_s = TIME_BUDGET_S if budget_s is None else budget_s
    assert w.batch_size, "fit_batch has checked the batch size"
    top, source = fit_top(fit)
    notes: list[str] = []
    if max_rungs is None and w.device != "cuda":
        max_rungs = CPU_RUNGS
        notes.append(CPU_NOTE)
    if top is None and max_rungs is None:
        max_rungs = CPU_RUNGS
        notes.append(f"no batch predicted to fit: the ladder goes to {CPU_RUNGS} batches")
    batches = ladder_batches(w.batch_size, top, max_rungs)
    in_child = timer is None and w.device == "cuda" and w.reload is not None
    where = "a fresh process per batch" if in_child else "this process"
    if timer is None:
        timer = (_child_timer(w.reload, budget_s) if in_child and w.reload is not None
                 else _here_timer(w, budget_s))
    rungs: list[Rung] = []
    for i, b in enumerate(batches):
        say(f"throughput: batch {b} ({i + 1} of {len(batches)}, {where})")
        try:
            rung = _rung(*timer(b))
        except Exception as exc:  # out of memory, or the workload refusing: a rung, said
            rungs.append(Rung(b, None, None, error=_first_line(exc), oom=is_oom(exc)))
            notes.append(f"the ladder stopped at batch {b}: "
                         + ("out of memory" if is_oom(exc) else _first_line(exc)))
            say(f"throughput: batch {b} did not run ({rungs[-1].error})")
            break
        finally:
            free_memory(w.device)
        rungs.append(rung)
        say(f"throughput: batch {rung.batch}: {fmt_s(rung.step_s)} per step, "
            f"{fmt_num(rung.samples_per_s)} samples/s")
    ran = [r for r in rungs if r.samples_per_s is not None]
    base = ran[0] if ran and ran[0].batch == w.batch_size else None
    last = ran[-1] if ran else None
    gain_last = (last.samples_per_s / base.samples_per_s
                 if base and last and base.samples_per_s and last.samples_per_s else None)
    reached = (top is not None and batches[-1] == top and len(rungs) == len(batches)
               and rungs[-1] is last)
    at_fit = gain_last if reached else None
    noisy = [r for r in ran if r.noisy]
    if noisy:
        notes.append("noisy timings (the spread never fell under the timer's threshold) at "
                     + ", ".join(f"batch {r.batch} (IQR {100 * (r.rel_iqr or 0):.0f}% of the "
                                 "median)" for r in noisy)
                     + ": their samples/s, and a knee read from them, are uncertain")
    if top is not None and top <= w.batch_size:
        notes.append(f"the batch that fits ({top}) is not above today's ({w.batch_size}): "
                     "nothing to climb")
    return Throughput(rungs, top, source, knee_batch(rungs), KNEE_GAIN, at_fit,
                      last.batch if last else None, gain_last, where,
                      len(doublings(rungs)), notes)


def _here_timer(w: Workload, budget_s: float) -> Timer:
    """Each batch in this process: today's batch is `w` itself, the others built again
    (a factory) or its inputs repeated; the user's state put back after each."""
    from gobrrr.state import preserved_state
    from gobrrr.timing import measure

    def run(batch: int) -> tuple[int, dict[str, Any]]:
        wb = w if batch == w.batch_size else at_batch(w, batch)
        with preserved_state(wb):
            t = measure(lambda: wb.run("timing"), device=wb.device, budget_s=budget_s)
        return wb.batch_size or batch, t.to_dict()

    return run


def time_in_child(spec: dict[str, Any], timeout_s: float = CHILD_TIMEOUT_S) -> dict[str, Any]:
    """`python -m gobrrr.memory_throughput SPEC` (the target built at spec's batch,
    timed): its Timing dict. Raises memory_fit.ChildFailed with the child's reason."""
    import subprocess

    from gobrrr.memory_fit import ChildFailed

    cmd = [sys.executable, "-m", "gobrrr.memory_throughput", json.dumps(spec)]
    what = f"batch {spec.get('batch_size')}"
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s)
    except subprocess.TimeoutExpired as exc:
        raise ChildFailed(f"{what}: no result within {timeout_s:.0f} s") from exc
    lines = [ln for ln in done.stdout.splitlines() if ln.strip()]
    try:
        got: dict[str, Any] = json.loads(lines[-1]) if lines else {}
    except json.JSONDecodeError:
        got = {}
    if done.returncode != 0 or "timing" not in got:
        err = [ln for ln in done.stderr.splitlines() if ln.strip()]
        raise ChildFailed(got.get("error") or (err[-1] if err else f"exit {done.returncode}"))
    timing: dict[str, Any] = got["timing"]
    return timing


def _child_timer(reload: dict[str, Any], budget_s: float) -> Timer:
    def run(batch: int) -> tuple[int, dict[str, Any]]:
        return batch, time_in_child(dict(reload, batch_size=batch, budget_s=budget_s))

    return run


def _child(spec: dict[str, Any]) -> dict[str, Any]:
    """In the child: build the target at the batch, time its step (nothing else runs in
    this process, so no state needs putting back)."""
    from gobrrr.models import ModelOptions
    from gobrrr.targets import load_target
    from gobrrr.timing import measure

    opts = ModelOptions(**spec["options"]) if spec.get("options") else None
    w = load_target(spec["target"], spec["device"], spec["batch_size"], opts)
    if w.batch_size != spec["batch_size"]:
        raise RuntimeError(f"asked for batch {spec['batch_size']}, the target built "
                           f"batch {w.batch_size}")
    return measure(lambda: w.run("timing"), device=w.device,
                   budget_s=float(spec.get("budget_s", TIME_BUDGET_S))).to_dict()


def main(argv: list[str]) -> int:
    try:
        print(json.dumps({"timing": _child(json.loads(argv[0]))}), flush=True)
        return 0
    except Exception as exc:  # noqa: BLE001 - the parent reads the reason
        # the user's exception is inside gobrrr's WorkloadError: its cause says OOM
        cause = exc.__cause__ if exc.__cause__ is not None else exc
        reason = f"{type(cause).__name__}: {str(cause).strip().splitlines()[0][:240]}" \
            if str(cause).strip() else type(cause).__name__
        print(json.dumps({"error": reason}), flush=True)
        return 1


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
