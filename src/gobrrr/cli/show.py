"""`gobrrr show REPORT.json`: a saved doctor or analyze report (a CI artifact, a report
from a GPU machine) rendered as doctor would have rendered it: the terminal rendering on
stdout, the page with --html, the trace with --trace. Parsing only; the checks are
compare.load_report's (readable, JSON, a gobrrr report of schema 1.x), the rendering is
gobrrr.show's."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

__all__ = ["register"]


@click.command("show")
@click.argument("report_path", metavar="REPORT.json", type=click.Path(path_type=Path))
@click.option("--html", "html_path", type=click.Path(dir_okay=False, path_type=Path),
              help="Also write the self-contained HTML report here.")
@click.option("--trace", "trace_path", type=click.Path(dir_okay=False, path_type=Path),
              help="Also write a Chrome/Perfetto trace of its profiled run here.")
@click.option("-q", "--quiet", is_flag=True, help="No progress output.")
def show(report_path: Path, html_path: Path | None, trace_path: Path | None,
         quiet: bool) -> None:
    """Render a saved `gobrrr doctor --json` or `gobrrr analyze --json` report as doctor
    shows it: the terminal report on stdout, --html the page, --trace the trace. Nothing
    is measured: every number is the report's."""
    from gobrrr.cli.common import check_writable, deliver, progress_printer, run_guarded, shower

    def body() -> None:
        from gobrrr.compare import load_report
        from gobrrr.show import save_html, save_trace
        from gobrrr.show.terminal import print_report

        check_writable(html_path, trace_path)
        say = progress_printer(quiet)
        d = load_report(report_path)
        writes: list[tuple[Path, Callable[[Path], Any]]] = []
        # the trace first: a report without per-call rows (schema 1.0) cannot be traced,
        # and says so before anything else is written
        if trace_path is not None:
            writes.append((trace_path, lambda p: save_trace(d, p)))
        if html_path is not None:
            writes.append((html_path, lambda p: save_html(d, p)))
        # no --json: the file is the JSON
        deliver(writes, shower(False, lambda: d, lambda: print_report(d)), say)

    run_guarded(body)


def register(group: click.Group) -> None:
    group.add_command(show)
