"""A script's closed window (script_window.Window) -> its Report: the profiled steps'
trace read as `gobrrr analyze` reads any trace (tracefile/), with the window's own
unprofiled timing and wait for data, judged by the one end (diagnosis.py).

`gobrrr run` calls it in a child process (cli/run_report.py), so that the script's
process never loads the analysis: on a host-bound CPU loop, making the report in the
script's process left its steps after the window 0.67% slower (docs/run.md, "The cost
after the window"). A trainer's callback (StepWindow) and torchrun's rank 0 call it in
their own process.
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from gobrrr.analyze import check_traces
from gobrrr.diagnosis import report_for
from gobrrr.dist.analyze import analyze_ranks
from gobrrr.dist.ceilings import load_cached
from gobrrr.dist.context import comm_facts
from gobrrr.report import Report
from gobrrr.run import DataLoading, MeasuredRun, Step
from gobrrr.script_window import IN_PLACE_NOTE, STEP_SOURCES, Timed, Window
from gobrrr.timing import from_samples
from gobrrr.tracefile.analysis import PROFILED_WALL_NOTE, analyse_trace
from gobrrr.tracefile.columns import stream_trace
from gobrrr.tracefile.loading import data_loading_in
from gobrrr.tracefile.read import read_header

__all__ = ["report_of", "report_ranks", "facts_of", "RANKS_NOTE"]

Progress = Callable[[str], None]


def _say_nothing(_msg: str) -> None:
    pass


def facts_of(window: Window) -> dict[str, Any]:
    """remedies.base.Context's fields of the script's objects, its optimizers rebuilt."""
    return window.facts | {"optimizers": [o.rebuilt() for o in window.facts["optimizers"]]}


def report_of(window: Window, say: Progress = _say_nothing) -> Report:
    """The report of one process's window; its trace file is read and removed."""
    say("reading the profiled steps")
    path = window.trace_path
    try:
        header = read_header(path)
        cols = stream_trace(path)
    finally:
        path.unlink(missing_ok=True)
    a = analyse_trace(header, window.ceilings, say, cols=cols)
    t = window.timed
    run = _script_run(t, window.name, a.run, _loading(t, data_loading_in(cols)))
    return report_for(run, window.ceilings, facts=facts_of(window),
                      started_s=window.started_s)


RANKS_NOTE = ("torchrun: every rank ran the script in place; each rank's T_wall is its "
              "own unprofiled window, its communication (transfer and waiting) read from "
              "its profiled steps' trace, the collectives matched across the ranks' traces "
              "as gobrrr analyze matches them; no no_sync experiment")


def report_ranks(window: Window, ranks: list[tuple[Timed, bytes]], modules: list[Any],
                 world: int, say: Progress = _say_nothing) -> Report:
    """Rank 0's merged report of a torchrun job: the ranks' traces (`ranks`: each rank's
    timing and trace) read as `gobrrr analyze` reads a job's (dist/analyze.analyze_ranks:
    the collectives matched, each rank's communication, the merged section), each rank
    with its own unprofiled timing; `modules`: rank 0's, live (the DDP and FSDP2
    remedies' facts, dist/context.comm_facts)."""
    folder = Path(tempfile.mkdtemp(prefix="gobrrr-run-ranks-"))
    try:
        for timed, data in ranks:
            (folder / f"rank{timed.rank}.json").write_bytes(data)
        timed_by_rank = {timed.rank: timed for timed, _ in ranks}
        headers = check_traces(sorted(folder.iterdir()))

        def run_of(r: int, traced: MeasuredRun) -> MeasuredRun:
            t = timed_by_rank[r]
            return _script_run(t, window.name, traced, _loading(t, None))

        facts = facts_of(window)  # rank 0's, its loaders too

        def facts_for(section: Any) -> dict[str, Any]:
            return facts | {"comm": comm_facts(modules, section, world, load_cached())}

        return analyze_ranks(headers, ceilings=window.ceilings, progress=say,
                             run_of=run_of, facts_for=facts_for, first_notes=[RANKS_NOTE])
    finally:
        for f in folder.iterdir():
            f.unlink(missing_ok=True)
        folder.rmdir()


def _script_run(t: Timed, name: str, traced: MeasuredRun,
                loading: DataLoading | None) -> MeasuredRun:
    """The run of one process's window: its own unprofiled timing, the profiled steps'
    ops (`traced`, the trace source's run)."""
    n = len(t.step_s)
    clock = ("synchronized at its ends; each step alone is host time" if t.device == "cuda"
             else "host clock")
    notes = [f"steps: {STEP_SOURCES[t.source]}; {t.warmup} warm-up step(s) run as "
             f"they are, {n} timed unprofiled (T_wall: the window's mean step, {clock}), "
             f"1 + {t.profiled} profiled for the op counts and times",
             *[x for x in traced.notes if x != PROFILED_WALL_NOTE]]
    if t.device == "cpu":
        notes.append("op times come from the profiled steps (the profiler adds CPU time "
                     "to each op): compute and memory are upper bounds, overhead a lower "
                     "bound, of the unprofiled steps'")
    if loading is not None:
        notes.append(f"data loading: {loading.source}")
    if t.skipped_steps:
        notes.append(f"{t.skipped_steps} step(s) in the window skipped their optimizer "
                     "step (AMP's GradScaler found inf/NaN gradients): each still ends a "
                     "step")
    notes.append(IN_PLACE_NOTE)
    return MeasuredRun(
        source="script",
        workload={"name": name, "description": f"the script {name}, run in place",
                  "device": t.device,
                  "batch_size": t.loaders[0].batch_size if t.loaders else None,
                  "source": "script",
                  "script": {"steps_from": t.source, "warmup": t.warmup,
                             "timed": n, "profiled": t.profiled,
                             "window_s": t.window_s}},
        device=t.device, timing=from_samples(t.step_s), wall_s=t.window_s / max(1, n),
        profile=traced.profile,
        steps=[Step(f"step {i + 1}", s) for i, s in enumerate(t.step_s)],
        notes=notes, data_loading=loading, series=list(t.series))


def _loading(t: Timed, in_trace: DataLoading | None) -> DataLoading | None:
    """The timed steps' wait for data, its device-idle share read from the profiled
    steps (all of it on CPU, and where the profiled steps saw no DataLoader range)."""
    if not t.loaders:
        return None
    host = sum(t.loading_s) / max(1, len(t.loading_s))
    idle = 1.0
    how = "the host is the device: all of it"
    if t.device == "cuda":
        if in_trace is not None and in_trace.host_s > 0:
            idle = in_trace.exposed_s / in_trace.host_s
            how = (f"the GPU idle {idle:.0%} of it in the profiled steps' DataLoader "
                   "ranges")
        else:
            how = "no DataLoader range in the profiled steps: taken as all idle (a bound)"
    return DataLoading(host_s=host, exposed_s=host * idle,
                       per_step_s=tuple(t.loading_s), first_batch_s=tuple(t.first_batches),
                       source=f"time inside DataLoader iterators' __next__ in the "
                              f"{len(t.loading_s)} timed steps (unprofiled); {how}")
