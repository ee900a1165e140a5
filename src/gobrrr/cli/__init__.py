"""Command line: argument parsing only; the work is in the API modules.

Data (tables, JSON) goes to stdout, progress and notes to stderr. Bad input: one line on
stderr and exit code 2. A workload that raises: the user's own traceback and exit 2.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from typing import Any, NoReturn

import click

from gobrrr import __version__
from gobrrr.errors import UserError, WorkloadError, user_traceback

__all__ = ["main", "cli"]

DEVICE = click.Choice(["auto", "cpu", "cuda"])


def _fail(message: str, code: int = 2) -> NoReturn:
    click.echo(f"gobrrr: error: {message}", err=True)
    sys.exit(code)


def resolve_device(device: str) -> str:
    """'auto' is CUDA when present; an explicit 'cuda' without CUDA is a user error."""
    import torch

    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if device == "cuda" and not torch.cuda.is_available():
        raise UserError("--device cuda: no CUDA device is available here (torch "
                        f"{torch.__version__}, cuda={torch.version.cuda})")
    return device


_ACTIVE_PROGRESS: list[Any] = []


class _LiveProgress:
    """On a terminal: a spinner with the current step and its elapsed time, finished steps
    printed above it, all on stderr. Closed by run_guarded when the command ends."""

    def __init__(self) -> None:
        from rich.console import Console
        from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

        self.progress = Progress(SpinnerColumn(), TextColumn("{task.description}"),
                                 TimeElapsedColumn(), console=Console(stderr=True),
                                 transient=True)
        self.task: Any = None
        self.last = ""

    def __call__(self, msg: str) -> None:
        from rich.markup import escape

        if self.task is None:
            self.progress.start()
            self.task = self.progress.add_task(escape(msg))
        else:
            self.progress.console.print(f"[dim]gobrrr: {escape(self.last)}[/dim]",
                                        highlight=False)
            self.progress.update(self.task, description=escape(msg))
        self.last = msg

    def close(self) -> None:
        if self.task is not None:
            self.progress.stop()
            self.task = None


def progress_printer(quiet: bool) -> Callable[[str], None]:
    """Progress on stderr, so stdout stays data (e.g. --json): a live spinner line on a
    terminal, plain lines otherwise (logs, CI, pipes)."""
    if quiet:
        return lambda _msg: None
    if sys.stderr.isatty():
        live = _LiveProgress()
        _ACTIVE_PROGRESS.append(live)
        return live
    from rich.console import Console
    from rich.markup import escape

    console = Console(stderr=True)
    return lambda msg: console.print(f"[dim]gobrrr: {escape(msg)}[/dim]", highlight=False)


def run_guarded(action: Callable[[], Any]) -> Any:
    """Run a command body, mapping our error types to one style of message and exit."""
    try:
        return action()
    except UserError as exc:
        finish_progress()
        _fail(str(exc), exc.exit_code)
    except WorkloadError as exc:
        finish_progress()
        click.echo(user_traceback(exc.original), err=True)
        _fail(str(exc), exc.exit_code)


def finish_progress() -> None:
    """Stop any live progress line before a command prints its results."""
    while _ACTIVE_PROGRESS:
        _ACTIVE_PROGRESS.pop().close()




def emit_json(data: Any) -> None:
    finish_progress()
    click.echo(json.dumps(data, indent=2, default=str))


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="gobrrr")
def cli() -> None:
    """Why is this PyTorch workload slow? Compute, memory bandwidth or overhead,
    measured on this machine, with the essay's experiments as evidence."""


@cli.command()
@click.option("--device", type=DEVICE, default="auto", show_default=True)
@click.option("--force", is_flag=True, help="Re-measure even if a cached result exists.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON on stdout.")
@click.option("-q", "--quiet", is_flag=True, help="No progress output.")
def calibrate(device: str, force: bool, as_json: bool, quiet: bool) -> None:
    """Measure this machine's ceilings (matmul FLOP/s per dtype, bandwidth, per-op cost)."""

    def body() -> None:
        from gobrrr.hardware import calibrate as _calibrate
        from gobrrr.show.terminal import print_ceilings

        dev = resolve_device(device)
        progress = progress_printer(quiet)
        ceilings = _calibrate(dev, force=force, progress=progress)
        for note in ceilings.notes:
            progress(note)
        if as_json:
            emit_json(ceilings.to_dict())
        else:
            finish_progress()
            print_ceilings(ceilings)

    run_guarded(body)


# Commands that live in their own modules (one job each); each module has
# `register(group)` and imports nothing heavy at module level.
_COMMAND_MODULES: tuple[str, ...] = ("doctor", "lab", "compare", "optimize")


def _register_optional_commands() -> None:
    import importlib

    for name in _COMMAND_MODULES:
        importlib.import_module(f"gobrrr.cli.{name}").register(cli)


_register_optional_commands()


def main() -> None:
    cli(prog_name="gobrrr")
