"""`gobrrr doctor [TARGET]`: diagnose a workload."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from gobrrr.cli.common import TARGET_HELP, model_options

__all__ = ["register"]


_HELP = f"Split a workload's time into compute, memory and overhead.\n\n{TARGET_HELP}"


@click.command(help=_HELP)
@click.argument("target", required=False)
@click.option("--device", type=click.Choice(["auto", "cpu", "cuda"]), default="auto",
              show_default=True)
@click.option("--batch-size", type=click.IntRange(min=1), default=None,
              help="Batch size for a factory target (default: its own default).")
@model_options
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON on stdout.")
@click.option("--no-experiments", is_flag=True, help="Skip batch scaling and graph replay.")
@click.option("--time-budget", "time_budget_s", type=click.FloatRange(min=0.05), default=2.0,
              show_default=True,
              help="Sampling seconds per measurement (warm-up included, the first call "
                   "not); a call longer than this is made 3 times. Per measurement, not "
                   "a limit on the whole run (that is optimize's --budget-s).")
@click.option("--html", "html_path", type=click.Path(dir_okay=False, path_type=Path),
              help="Also write a self-contained HTML report here.")
@click.option("--trace", "trace_path", type=click.Path(dir_okay=False, path_type=Path),
              help="Also write a Chrome/Perfetto trace of the profiled run here.")
@click.option("-q", "--quiet", is_flag=True, help="No progress output.")
def doctor(target: str | None, device: str, batch_size: int | None, seq_len: int | None,
           image_size: int | None, dtype: str | None, train: bool, as_json: bool,
           no_experiments: bool, time_budget_s: float, quiet: bool,
           html_path: Path | None = None, trace_path: Path | None = None) -> None:
    """Split a workload's time into compute, memory and overhead (help: _HELP)."""
    from gobrrr.cli.common import (
        check_writable,
        deliver,
        progress_printer,
        resolve_device,
        run_guarded,
        show_notes,
        shower,
    )

    def body() -> None:
        from gobrrr.api import diagnose_workload
        from gobrrr.models import ModelOptions
        from gobrrr.show.terminal import print_report
        from gobrrr.workload import load_target

        check_writable(html_path, trace_path)
        dev = resolve_device(device)
        say = progress_printer(quiet)
        w = load_target(target, dev, batch_size,
                        ModelOptions(seq_len, image_size, dtype, train))
        say(f"workload {w.name} (batch {w.batch_size}) on {w.device}"
            + (f": {w.description}" if w.details else ""))  # a model target: what was built
        report = diagnose_workload(w, experiments=not no_experiments,
                                   time_budget_s=time_budget_s, progress=say)
        # diagnose_workload records name, description, device and batch; a model
        # target's details (library, config, dtype, mode) come from the Workload itself
        show_notes(report.notes, say, quiet)
        writes: list[tuple[Path, Callable[[Path], Any]]] = []
        if html_path is not None:
            writes.append((html_path, report.save_html))
        if trace_path is not None:
            writes.append((trace_path, report.save_trace))

        deliver(writes, shower(as_json, report.to_dict, lambda: print_report(report)), say)

    run_guarded(body)


def register(group: click.Group) -> None:
    group.add_command(doctor)
