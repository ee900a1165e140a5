"""`gobrrr optimize [TARGET]`: apply the essay's remedies to copies, verify, rank."""

from __future__ import annotations

from typing import TYPE_CHECKING

import click

if TYPE_CHECKING:
    from gobrrr.remedies.result import OptimizeResult

__all__ = ["register", "print_optimize"]

_STATUS_STYLE = {"verified": "green", "rejected": "red", "failed": "red", "slower": "yellow",
                 "no significant change": "dim", "not applicable": "dim", "advice": "cyan"}


def _x(v: float | None) -> str:
    return "-" if v is None else f"{v:.2f}x"


def print_optimize(res: OptimizeResult) -> None:
    """The ranked table, each remedy's reason, the winner and its code (stdout)."""
    from rich.markup import escape
    from rich.table import Table

    from gobrrr.render import console

    out = console()
    w = res.workload
    title = (f"optimize {w['name']} on {w['device']}" +
             (f" (batch {w['batch_size']})" if w.get("batch_size") else "") +
             (f", diagnosed {res.regime}-bound" if res.regime else ""))
    table = Table(title=title, title_justify="left", pad_edge=False)
    table.add_column("remedy", overflow="fold")
    table.add_column("status", overflow="fold")
    table.add_column("pred.", justify="right")
    table.add_column("meas.", justify="right")
    table.add_column("95% int.", justify="right")
    table.add_column("prep s", justify="right")
    rank = {"verified": 0, "no significant change": 1, "slower": 2, "advice": 3,
            "rejected": 4, "failed": 5, "not applicable": 6}
    rows = sorted(res.remedies, key=lambda r: (rank.get(r.status, 9),
                                               -(r.measured_speedup or 0)))
    for r in rows:
        style = _STATUS_STYLE.get(r.status, "")
        iv = f"{r.interval[0]:.2f}-{r.interval[1]:.2f}" if r.interval else "-"
        status = "no sig. change" if r.status == "no significant change" else r.status
        table.add_row(escape(r.name), f"[{style}]{status}[/]" if style else status,
                      _x(r.predicted_speedup), _x(r.measured_speedup), iv,
                      "-" if r.compile_s is None else f"{r.compile_s:.1f}")
    out.print(table)
    for r in rows:
        if r.reason:
            out.print(f"  [bold]{escape(r.name)}[/]: {escape(r.reason)}")
        breaks = r.checks.get("graph_breaks")
        if breaks:
            out.print(f"    {breaks} graph break(s): "
                      f"{escape('; '.join(r.checks.get('break_reasons', [])))}")
    best = res.best
    if best is None:
        out.print("\n[bold]Best:[/] eager as it is: no remedy was verified faster.")
    else:
        pred = f", predicted {_x(best.predicted_speedup)}" if best.predicted_speedup else ""
        out.print(f"\n[bold]Best:[/] {escape(best.name)}: {_x(best.measured_speedup)} "
                  f"measured{pred}; outputs verified ({escape(best.tolerance)}).")
    out.print(escape(res.snippet), soft_wrap=True)
    for note in res.notes:
        out.print(f"[dim]note: {escape(note)}[/dim]")


@click.command()
@click.argument("target", required=False)
@click.option("--device", type=click.Choice(["auto", "cpu", "cuda"]), default="auto",
              show_default=True)
@click.option("--batch-size", type=click.IntRange(min=1), default=None,
              help="Batch size for a factory target (default: its own default).")
@click.option("--budget-s", type=click.FloatRange(min=1), default=120.0, show_default=True,
              help="Seconds for remedies and combinations (after diagnose).")
@click.option("--only", "only", multiple=True,
              help="Remedies or families to try, e.g. --only compile,tf32 (repeatable).")
@click.option("--no-diagnose", is_flag=True,
              help="Skip diagnose: faster, but no predicted speedups.")
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON on stdout.")
@click.option("--html", "html_path", type=click.Path(dir_okay=False), default=None,
              metavar="FILE", help="Also write a self-contained HTML page here.")
@click.option("-q", "--quiet", is_flag=True, help="No progress output.")
def optimize(target: str | None, device: str, batch_size: int | None, budget_s: float,
             only: tuple[str, ...], no_diagnose: bool, as_json: bool, html_path: str | None,
             quiet: bool) -> None:
    """Apply the essay's remedies to a copy of a workload, verify outputs and speed,
    and rank them: CUDA graphs, torch.compile, TF32, bf16, channels_last, fused
    optimizers, set_to_none, SDPA, batch size (advice).

    TARGET is FILE.py:NAME or examples:NAME, as for `gobrrr doctor`.
    """
    from gobrrr.cli import emit_json, finish_progress, progress_printer, resolve_device, run_guarded

    def body() -> None:
        from gobrrr.errors import UserError
        from gobrrr.remedies import catalog
        from gobrrr.remedies.runner import optimize_workload
        from gobrrr.workload import load_target

        catalog.select(list(only))  # unknown names: one line, exit 2, before any work
        dev = resolve_device(device)
        say = progress_printer(quiet)
        w = load_target(target, dev, batch_size)
        say(f"workload {w.name} (batch {w.batch_size}) on {w.device}")
        res = optimize_workload(w, diagnose=not no_diagnose, budget_s=budget_s,
                                only=list(only) or None, progress=say)
        if html_path:
            from gobrrr.html.optimize import write_optimize

            try:
                write_optimize(res.to_dict(), html_path)
            except OSError as exc:
                raise UserError(f"cannot write {html_path}: {exc.strerror or exc}") from exc
            say(f"wrote {html_path}")
        if as_json:
            emit_json(res.to_dict())
        else:
            finish_progress()
            print_optimize(res)

    run_guarded(body)


def register(group: click.Group) -> None:
    group.add_command(optimize)
