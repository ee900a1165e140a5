"""A lab run as figures (matplotlib, Agg canvas, no pyplot state) and one self-contained
HTML page (the shared page builder, show/page.py). Measures nothing."""

from __future__ import annotations

import io
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from gobrrr.lab import LabReport
    from gobrrr.lab.common import LabResult

__all__ = ["figure_of", "svg", "write_plots", "render_html"]


def _plot_into(result: LabResult, axes: Any) -> None:
    from gobrrr.lab import experiment_module

    experiment_module(result.name).plot(result, axes)


def figure_of(results: list[LabResult]) -> Any:
    """One Figure with a row of two panels per experiment, on an Agg canvas (no pyplot,
    no global backend switch)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    n = max(1, len(results))
    fig = Figure(figsize=(11, 3.6 * n))
    FigureCanvasAgg(fig)
    axes = fig.subplots(n, 2, squeeze=False)
    for row, r in zip(axes, results, strict=False):
        _plot_into(r, row)
    fig.tight_layout()
    return fig


def svg(fig: Any) -> str:
    buf = io.StringIO()
    fig.savefig(buf, format="svg", metadata={"Date": None})  # reproducible output
    text = buf.getvalue()
    return text[text.find("<svg"):]  # drop the XML prolog and doctype: inline in HTML


def write_plots(report: LabReport, out_dir: Path) -> list[Path]:
    """lab.svg and lab.png in out_dir: every experiment's panels in one figure."""
    out_dir.mkdir(parents=True, exist_ok=True)
    fig = figure_of(report.results)
    paths = [out_dir / "lab.svg", out_dir / "lab.png"]
    fig.savefig(paths[0], format="svg", metadata={"Date": None})
    fig.savefig(paths[1], format="png", dpi=80)
    return paths


_WORD = {True: "agrees", False: "differs", None: "n/a"}


def render_html(report: LabReport) -> str:
    """One self-contained page from the shared page builder (show/page.py): every string
    escaped; only matplotlib's own SVG (built from our numbers) is inserted as markup."""
    from markupsafe import Markup

    from gobrrr.lab.common import ESSAY_SOURCE
    from gobrrr.show.page import Section, figure, paragraph, render_page, table
    from gobrrr.units import fmt_bytes_per_s, fmt_flops, fmt_s

    fp = report.fingerprint
    c = report.ceilings
    peaks = ", ".join(f"matmul {d} {fmt_flops(v)}" for d, v in c["peak_flops_per_s"].items())
    subtitle = (f"{fp.get('name', report.device)} ({report.device}), torch {fp.get('torch')}, "
                f"python {fp.get('python')}{', quick sizes' if report.quick else ''}; "
                f"started {report.started_at}, {report.wall_s:.1f} s. Ceilings: {peaks}, "
                f"copy {fmt_bytes_per_s(c['bandwidth_bytes_per_s'])}, eager op "
                f"{fmt_s(c['op_overhead_s'])}.")
    conclusions = [[r.name, _WORD[r.agrees_with_essay], r.conclusion] for r in report.results]
    conclusions += [[name, "failed", err] for name, err in report.errors.items()]
    sections = [Section("conclusions", "Conclusions",
                        table(["experiment", "vs essay", "conclusion"], conclusions,
                              sortable=False, text_columns=(0, 1, 2)))]
    for r in report.results:
        cols, rows = r.table()
        parts = [paragraph(f"Conclusion [{_WORD[r.agrees_with_essay]}]: {r.conclusion}"),
                 figure(svg(figure_of([r]))),
                 table(cols, rows, sortable=False),
                 table(["essay claim", "essay (A100)"], [[e.what, e.essay] for e in r.essay],
                       sortable=False, text_columns=(0, 1))]
        parts += [paragraph(f"note: {n}", "note") for n in r.notes]
        sections.append(Section(r.name, f"{r.name}: {r.title}", Markup("").join(parts)))
    return render_page("gobrrr lab", sections, subtitle=subtitle,
                       footer=f"Essay numbers: {ESSAY_SOURCE}.")
