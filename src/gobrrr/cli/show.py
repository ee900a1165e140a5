"""`gobrrr show REPORT.json`: a saved doctor or analyze report (a CI artifact, a report
from a GPU machine) rendered as doctor would have rendered it: the terminal rendering on
stdout, the page with --html, the trace with --trace. Parsing only; the checks are
compare.load_report's (readable, JSON, a gobrrr report of schema 1.x), the rendering is
gobrrr.show's."""

from __future__ import annotations

from pathlib import Path

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
    from gobrrr.cli.common import (
        check_writable,
        deliver_report,
        progress_printer,
        run_guarded,
    )

    def body() -> None:
        from gobrrr.compare import load_report

        check_writable(html_path, trace_path)
        say = progress_printer(quiet)
        # no --json: the file is the JSON
        deliver_report(load_report(report_path), as_json=False, say=say,
                       html_path=html_path, trace_path=trace_path)

    run_guarded(body)


def register(group: click.Group) -> None:
    group.add_command(show)
