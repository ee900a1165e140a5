"""`gobrrr calibrate`: measure this machine's ceilings (cached)."""

from __future__ import annotations

import click

from gobrrr.cli.common import DEVICE

__all__ = ["register"]


@click.command()
@click.option("--device", type=DEVICE, default="auto", show_default=True)
@click.option("--force", is_flag=True, help="Re-measure even if a cached result exists.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON on stdout.")
@click.option("-q", "--quiet", is_flag=True, help="No progress output.")
def calibrate(device: str, force: bool, as_json: bool, quiet: bool) -> None:
    """Measure this machine's ceilings (matmul FLOP/s per dtype, bandwidth, per-op cost)."""

    from gobrrr.cli.common import (
        emit_json,
        finish_progress,
        progress_printer,
        resolve_device,
        run_guarded,
    )

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


def register(group: click.Group) -> None:
    group.add_command(calibrate)
