"""Self-contained HTML reports: jinja2 templates (autoescaped), matplotlib figures as
inline SVG, inline CSS and a tiny inline table sorter. No network, no external files.

- `render_report(report_dict)` / `write_report(report_dict, path)`: the doctor report
  (`Report.save_html` and `gobrrr doctor --html` call these).
- `render_page(title, sections)` with `Section`, `table`, `figure`, `paragraph`: the
  building blocks, for other commands (optimize, lab) to make pages in the same style.
"""

from __future__ import annotations

from gobrrr.show.page import Section, figure, paragraph, render_page, table
from gobrrr.show.report_html import render_report, report_sections, rows_table, write_report

__all__ = ["Section", "figure", "paragraph", "render_page", "table", "render_report",
           "report_sections", "rows_table", "write_report"]
