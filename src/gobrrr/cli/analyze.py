"""`gobrrr analyze TRACE`: the report of a torch.profiler trace recorded elsewhere."""

from __future__ import annotations

from pathlib import Path

import click

__all__ = ["register"]


@click.command()
@click.argument("traces", nargs=-1, required=True,
                type=click.Path(dir_okay=True, path_type=Path))
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON on stdout.")
@click.option("--html", "html_path", type=click.Path(dir_okay=False, path_type=Path),
              help="Also write a self-contained HTML report here.")
@click.option("-q", "--quiet", is_flag=True, help="No progress output.")
def analyze(traces: tuple[Path, ...], as_json: bool, quiet: bool,
            html_path: Path | None = None) -> None:
    """Split the time of a profiled workload into compute, memory and overhead, from a
    torch.profiler trace (Chrome JSON, .json or .json.gz) recorded anywhere.

    Record it with torch.profiler.profile(record_shapes=True, schedule=...) and
    prof.step() per step; export_chrome_trace or tensorboard_trace_handler writes it.
    Several files are accepted only as the ranks of one distributed job (not merged yet).
    """
    from gobrrr.cli.common import (
        check_writable,
        deliver_report,
        progress_printer,
        run_guarded,
    )

    def body() -> None:
        from gobrrr.analyze import analyze as analyze_traces

        check_writable(html_path)
        say = progress_printer(quiet)
        report = analyze_traces(list(traces), progress=say)
        for note in report.notes:
            say(note)
        deliver_report(report.to_dict(), as_json=as_json, say=say, html_path=html_path)

    run_guarded(body)


def register(group: click.Group) -> None:
    group.add_command(analyze)
