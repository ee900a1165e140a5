"""`gobrrr compare OLD.json NEW.json`: what changed between two doctor runs; exit 1 when
NEW is significantly slower than --fail-above allows (a CI gate). Parsing only; the work
is in gobrrr.compare."""

from __future__ import annotations

import sys
from pathlib import Path

import click

__all__ = ["register", "EXIT_REGRESSION"]

# 2 is taken by bad input (one error style, errors.py); a regression is its own code.
EXIT_REGRESSION = 1


@click.command("compare")
@click.argument("old", type=click.Path(dir_okay=False, path_type=Path))
@click.argument("new", type=click.Path(dir_okay=False, path_type=Path))
@click.option("--fail-above", default="5%", show_default=True, metavar="PCT",
              help="Exit 1 when NEW's wall time is more than PCT above OLD's with 97.5% "
                   "confidence: the low end of a 95% bootstrap interval of the ratio of "
                   "medians, from both runs' samples, is above PCT.")
@click.option("--force", is_flag=True,
              help="Compare reports of different workloads or devices (refused otherwise).")
@click.option("--top", type=click.IntRange(min=1), default=8, show_default=True,
              help="Top ops (by time) of each report to show.")
@click.option("--json", "as_json", is_flag=True, help="Print the comparison as JSON.")
@click.option("-q", "--quiet", is_flag=True, help="No verdict line on stderr.")
def compare(old: Path, new: Path, fail_above: str, force: bool, top: int, as_json: bool,
            quiet: bool) -> None:
    """Compare two `gobrrr doctor --json` reports: wall time with its confidence interval,
    regime split, top ops. Exit codes: 0 pass, 1 NEW significantly slower than
    --fail-above, 2 bad input (including different workloads or devices without
    --force)."""
    from gobrrr.cli.common import emit_json, run_guarded

    def body() -> bool:
        from gobrrr.compare import compare as _compare
        from gobrrr.compare import load_report, parse_percent
        from gobrrr.show.terminal import print_comparison

        threshold = parse_percent(fail_above)
        c = _compare(load_report(old), load_report(new), fail_above=threshold, top=top,
                     force=force)
        if as_json:
            emit_json(c.to_dict())
        else:
            print_comparison(c)
        if c.regressed and not quiet:
            why = (f"{c.interval_text}, low end above" if c.interval_text
                   else "medians only, too few samples; above")
            click.echo(f"gobrrr: NEW is {100 * c.change:.1f}% slower than OLD "
                       f"({why} --fail-above {100 * threshold:g}%)", err=True)
        return c.regressed

    if run_guarded(body):
        sys.exit(EXIT_REGRESSION)


def register(group: click.Group) -> None:
    group.add_command(compare)
