"""`gobrrr compare OLD.json NEW.json`: what changed between two doctor runs (or two sides
of several); exit 1 when NEW does more work, or is slower, than --fail-above allows (a CI
gate). Parsing only; the work is in gobrrr.compare."""

from __future__ import annotations

import sys

import click

__all__ = ["register", "EXIT_REGRESSION"]

# 2 is taken by bad input (one error style, errors.py); a regression is its own code.
EXIT_REGRESSION = 1


@click.command("compare")
@click.argument("old")
@click.argument("new")
@click.option("--fail-above", default="5%", show_default=True, metavar="PCT",
              help="Exit 1 when NEW's counted FLOPs, bytes or op calls exceed OLD's by more "
                   "than PCT, or, with 3 or more runs a side (doctor --repeat 3, or several "
                   "reports), when NEW's time is more than PCT above OLD's with 97.5% "
                   "confidence (the low end of a 95% Welch interval over the runs). With "
                   "fewer runs, time fails only beyond +100%: one run's samples cannot see "
                   "the shifts between runs.")
@click.option("--force", is_flag=True,
              help="Compare reports of different workloads or devices (refused otherwise).")
@click.option("--top", type=click.IntRange(min=1), default=8, show_default=True,
              help="Top ops (by time) of each report to show.")
@click.option("--json", "as_json", is_flag=True, help="Print the comparison as JSON.")
@click.option("-q", "--quiet", is_flag=True, help="No verdict line on stderr.")
def compare(old: str, new: str, fail_above: str, force: bool, top: int, as_json: bool,
            quiet: bool) -> None:
    """Compare `gobrrr doctor --json` reports: OLD and NEW are each a report, or several
    reports of one side separated by commas (a.json,b.json,c.json). Counted work, wall
    time with its confidence interval, regime split, top ops. Exit codes: 0 pass, 1 NEW
    worse than --fail-above allows, 2 bad input (including different workloads or
    devices without --force)."""
    from gobrrr.cli.common import emit_json, run_guarded

    def body() -> bool:
        from gobrrr.compare import compare as _compare
        from gobrrr.compare import load_side, parse_percent
        from gobrrr.show.terminal import print_comparison

        threshold = parse_percent(fail_above)
        c = _compare(load_side(old), load_side(new), fail_above=threshold, top=top,
                     force=force)
        if as_json:
            emit_json(c.to_dict())
        else:
            print_comparison(c)
        if c.regressed and not quiet:
            for w in c.work_regressed:
                click.echo(f"gobrrr: NEW counts {100 * (w.change or 0):.1f}% more {w.name} "
                           f"than OLD ({w.old:,} -> {w.new:,}; --fail-above "
                           f"{100 * threshold:g}%)", err=True)
            if c.time_regressed:
                why = (f"{c.interval_text}, low end above" if c.interval_text
                       else "medians only, too few samples; above")
                click.echo(f"gobrrr: NEW is {100 * c.change:.1f}% slower than OLD "
                           f"({why} {100 * c.time_limit:g}%)", err=True)
        return c.regressed

    if run_guarded(body):
        sys.exit(EXIT_REGRESSION)


def register(group: click.Group) -> None:
    group.add_command(compare)
