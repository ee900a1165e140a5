"""`gobrrr run [OPTIONS] SCRIPT.py [ARGS]...` (or `-m MODULE [ARGS]...`): the user's own
script, run in place and unchanged; its steps measured (gobrrr.script). The script keeps
stdout and its exit status: the report's files are written as soon as the measured steps
end, and the terminal report follows the script's own output once it ends, as
`python -m cProfile` prints its table."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

__all__ = ["register"]

_HELP = """Run your own script unchanged and diagnose its steps.

\b
  gobrrr run train.py --lr 3e-4         your script, its own arguments after it
  gobrrr run -m mypackage.train ...     a module, as python -m runs it
  python -m gobrrr run train.py ...     the same

Steps are found without code changes: each optimizer step() (training), else each
forward of the outermost module (inference); gobrrr.step() in the script marks them by
hand and gobrrr.watch() limits them to a region. --warmup steps run as they are, --steps
are timed unprofiled, then 1 + --profiled are profiled and counted. The report is written
when those steps end; the script then runs to its end (or stops: --exit-after)."""


@click.command(help=_HELP, context_settings={"ignore_unknown_options": True,
                                              "allow_interspersed_args": False})
@click.option("-m", "module", metavar="MODULE", default=None,
              help="Run a module as python -m does (its arguments follow).")
@click.option("--warmup", type=click.IntRange(min=0), default=3, show_default=True,
              help="Steps run as they are first (compile, autotuning, first batches).")
@click.option("--steps", type=click.IntRange(min=1), default=20, show_default=True,
              help="Steps timed unprofiled.")
@click.option("--profiled", type=click.IntRange(min=1), default=3, show_default=True,
              help="Steps profiled and counted (after one profiler warm-up step).")
@click.option("--json", "json_path", type=click.Path(dir_okay=False, path_type=Path),
              help="Write the report as JSON here.")
@click.option("--html", "html_path", type=click.Path(dir_okay=False, path_type=Path),
              help="Write a self-contained HTML report here.")
@click.option("--trace", "trace_path", type=click.Path(dir_okay=False, path_type=Path),
              help="Write a Chrome/Perfetto trace of the profiled step here.")
@click.option("--exit-after", is_flag=True,
              help="Stop the script once the report is written.")
@click.option("-q", "--quiet", is_flag=True, help="No progress output.")
@click.argument("argv", nargs=-1, type=click.UNPROCESSED)
def run(module: str | None, warmup: int, steps: int, profiled: int,
        json_path: Path | None, html_path: Path | None, trace_path: Path | None,
        exit_after: bool, quiet: bool, argv: tuple[str, ...]) -> None:
    """Run a script in place and diagnose its steps (help: _HELP)."""
    from gobrrr.cli.common import check_writable, run_guarded

    if module is None and not argv:
        raise click.UsageError("give a script (gobrrr run train.py ...) or -m MODULE")
    script, args = (None, list(argv)) if module is not None else (argv[0], list(argv[1:]))
    run_guarded(lambda: check_writable(json_path, html_path, trace_path))
    say = _rank_zero(_lines(quiet))
    result = run_guarded(lambda: _run(script, module, args, warmup, steps, profiled,
                                      exit_after, json_path, html_path, trace_path, say))
    raise SystemExit(_finish(result))


def _run(script: str | None, module: str | None, args: list[str], warmup: int,
         steps: int, profiled: int, exit_after: bool, json_path: Path | None,
         html_path: Path | None, trace_path: Path | None, say: Callable[[str], None]
         ) -> Any:
    from gobrrr.script import ScriptOptions, run_script
    from gobrrr.show.files import write_report_files

    def deliver(report: Any) -> None:
        write_report_files(report.to_dict(), json_path, html_path, trace_path, say)

    return run_script(script, args, module=module,
                      opts=ScriptOptions(warmup, steps, profiled, exit_after),
                      progress=say, deliver=deliver)


def _lines(quiet: bool) -> Callable[[str], None]:
    """Progress as plain lines on stderr, on a terminal too. The other commands' live
    spinner (common.progress_printer) is rich's Live: a thread that redraws it 10 times a
    second, taking the GIL each time, and a proxy on sys.stdout, both in the script's own
    process from its first step to its end (they stopped at `_finish`): in the timed
    window and in every step after it (1.9% of a core on the 2-core CPU of
    docs/run.md's "The cost after the window"), and the script's prints went through
    the proxy."""
    if quiet:
        return lambda _msg: None
    from rich.console import Console
    from rich.markup import escape

    console = Console(stderr=True)
    return lambda msg: console.print(f"[dim]gobrrr: {escape(msg)}[/dim]", highlight=False)


def _rank_zero(say: Callable[[str], None]) -> Callable[[str], None]:
    """Under torchrun (RANK set in every rank's environment) the other ranks' progress
    would repeat rank 0's line for line: only their warnings are shown."""
    import os

    from gobrrr.errors import WARNING

    if os.environ.get("RANK", "0") == "0":
        return say
    return lambda msg: say(msg) if msg.startswith(WARNING) else None


def _finish(result: Any) -> int:
    """After the script: its traceback (its own frames), the report on stdout, and the
    script's exit status."""
    from gobrrr.cli.common import finish_progress, stdout_guarded
    from gobrrr.script import script_traceback
    from gobrrr.show.terminal import print_report

    if result.error is not None:
        sys.stderr.write(script_traceback(result))
    finish_progress()
    if result.report is not None:
        sys.stdout.flush()
        with stdout_guarded():
            print_report(result.report.to_dict())
    elif not result.elsewhere:  # one line, even with --quiet: the user asked for one
        sys.stderr.write(f"gobrrr run: {result.why}\n")
    return int(result.exit_code)


def register(group: click.Group) -> None:
    group.add_command(run)
