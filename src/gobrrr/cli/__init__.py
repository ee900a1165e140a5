"""Command line: argument parsing only; the work is in the API modules. One module per
command (`doctor`, `run`, `analyze`, `show`, `optimize`, `memory`, `lab`, `compare`,
`calibrate`), each with
`register(group)` and nothing heavy imported at module level; what they share is in
common.py."""

from __future__ import annotations

import click

from gobrrr.version import __version__

__all__ = ["main", "cli"]


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="gobrrr")
def cli() -> None:
    """Why is this PyTorch workload slow? Compute, memory bandwidth or overhead,
    measured on this machine, with the essay's experiments as evidence."""


# Commands that live in their own modules (one job each); each module has
# `register(group)` and imports nothing heavy at module level.
_COMMAND_MODULES: tuple[str, ...] = ("doctor", "run", "analyze", "show", "optimize",
                                     "memory", "lab", "compare", "calibrate")


def _register_optional_commands() -> None:
    import importlib

    for name in _COMMAND_MODULES:
        importlib.import_module(f"gobrrr.cli.{name}").register(cli)


_register_optional_commands()


def main() -> None:
    cli(prog_name="gobrrr")
