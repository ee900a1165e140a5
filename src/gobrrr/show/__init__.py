"""Rendering a doctor report, from its dict (`Report.to_dict()`, or a saved --json): the
report owns its numbers, these only render them. Self-contained HTML (jinja2 templates,
autoescaped; matplotlib figures as inline SVG; inline CSS and a tiny table sorter; no
network, no external files), the Perfetto trace, and (show.terminal) the terminal.

- `save_html(report, path)`, `html(report)` (the same page as a fragment, for Jupyter:
  `IPython.display.HTML(gobrrr.show.html(report))`), `save_trace(report, path)`: each
  takes a Report or its dict; `gobrrr doctor --html/--trace` and `gobrrr show` call them.
- `render_report(report_dict)` / `write_report(report_dict, path)`: the page from a dict.
- `render_page(title, sections)` with `Section`, `table`, `figure`, `paragraph`: the
  building blocks, for other commands (optimize, lab) to make pages in the same style.

jinja2 and matplotlib are imported inside the functions that draw, so importing this
package stays light.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gobrrr.show.page import Section, figure, paragraph, render_page, table
from gobrrr.show.perfetto import write_trace
from gobrrr.show.report_html import render_report, report_sections, rows_table, write_report

if TYPE_CHECKING:
    from gobrrr.report import Report

__all__ = ["save_html", "html", "save_trace", "Section", "figure", "paragraph",
           "render_page", "table", "render_report", "report_sections", "rows_table",
           "write_report"]


def _dict_of(report: Report | Mapping[str, Any]) -> dict[str, Any]:
    """The report's dict as its saved JSON holds it (jsontext.as_saved), so a page or
    trace drawn now is the one `gobrrr show` draws from the file."""
    from gobrrr import jsontext

    d = dict(report) if isinstance(report, Mapping) else report.to_dict()
    return dict(jsontext.as_saved(d))


def save_html(report: Report | Mapping[str, Any], path: str | Path) -> Path:
    """One self-contained HTML file: verdict, budget, roofline, experiments, tables,
    remedies, machine."""
    return write_report(_dict_of(report), path)


def html(report: Report | Mapping[str, Any]) -> str:
    """The same report as an HTML fragment (styles scoped to it), for a notebook."""
    return render_report(_dict_of(report), standalone=False)


def save_trace(report: Report | Mapping[str, Any], path: str | Path) -> Path:
    """A Chrome/Perfetto JSON trace of the profiled run, annotated per op and kernel
    (show/perfetto.py)."""
    return write_trace(_dict_of(report), path)
