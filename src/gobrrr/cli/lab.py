"""`gobrrr lab`: the essay's experiments on this machine. Parsing only; the work is in
gobrrr.lab. Nothing heavy is imported until the command runs."""

from __future__ import annotations

from pathlib import Path

import click

__all__ = ["register"]

_NAMES = ("repeat", "fusion", "activations", "batch", "overhead", "opclasses")


@click.command("lab")
@click.argument("names", nargs=-1, metavar="[NAME]...")
@click.option("--device", type=click.Choice(["auto", "cpu", "cuda"]), default="auto",
              show_default=True)
@click.option("--quick", is_flag=True, help="Smaller sizes and fewer points.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON on stdout.")
@click.option("--html", "html_path", type=click.Path(dir_okay=False, path_type=Path),
              help="Write a self-contained HTML report here.")
@click.option("--out-dir", type=click.Path(file_okay=False, path_type=Path),
              help="Write the plots (lab.svg, lab.png) here.")
@click.option("-q", "--quiet", is_flag=True, help="No progress output.")
def lab(names: tuple[str, ...], device: str, quick: bool, as_json: bool,
        html_path: Path | None, out_dir: Path | None, quiet: bool) -> None:
    """Reproduce the essay's experiments here: repeat, fusion, activations, batch,
    overhead, opclasses (all when no NAME is given)."""
    import sys

    from gobrrr.cli.common import (
        check_writable,
        deliver,
        progress_printer,
        resolve_device,
        run_guarded,
        shower,
    )
    from gobrrr.errors import UserError

    def body() -> int:
        bad = [n for n in names if n not in _NAMES]
        if bad:
            raise UserError(f"unknown experiment {', '.join(map(repr, bad))}; "
                            f"choose from {', '.join(_NAMES)}")
        from gobrrr.lab import run_lab

        check_writable(html_path, out_dir / "lab.svg" if out_dir is not None else None)
        dev = resolve_device(device)
        progress = progress_printer(quiet)
        report = run_lab(list(names) or None, device=dev, quick=quick, progress=progress)
        writes: list = []
        if out_dir is not None:
            from gobrrr.show.lab_page import write_plots

            writes.append((out_dir / "lab.svg", lambda p: write_plots(report, p.parent)))
        if html_path is not None:
            from gobrrr.show.lab_page import render_html

            writes.append((html_path, lambda p: p.write_text(render_html(report),
                                                             encoding="utf-8")))

        from gobrrr.show.terminal import print_lab

        deliver(writes, shower(as_json, report.to_dict, lambda: print_lab(report)), progress)
        return 1 if report.errors else 0

    code = run_guarded(body)
    if code:
        sys.exit(code)


def register(group: click.Group) -> None:
    group.add_command(lab)
