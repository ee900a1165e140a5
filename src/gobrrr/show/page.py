"""The reusable part of the HTML report: a page made of sections, and escaped tables.

Any command can build a page: make `Section`s (bodies from `table()`, `figure()`,
`paragraph()` or its own jinja2 macros, all escaped) and pass them to `render_page`.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from gobrrr.show.budget_view import verdict_headline
from gobrrr.show.colors import REGIME_COLORS
from gobrrr.units import fmt_pct, fmt_s

if TYPE_CHECKING:
    import jinja2
    from markupsafe import Markup

__all__ = ["Section", "Cell", "render_page", "table", "figure", "paragraph", "environment"]

# A table cell: its text, or (text, sort key) where the key is the raw number behind a
# formatted text ("1.2 ms" -> 0.0012) so sorting is by value. Text is always escaped.
Cell = Any


@dataclass
class Section:
    """One part of a page: `body` must be Markup (escaped or our own SVG)."""

    id: str
    title: str
    body: Markup
    untitled: bool = False  # the body carries its own heading


_env: jinja2.Environment | None = None


def environment() -> jinja2.Environment:
    """The package's jinja2 environment: autoescape on for every template, undefined
    names are errors (a typo must not render as an empty string)."""
    global _env
    if _env is None:
        import jinja2

        _env = jinja2.Environment(
            loader=jinja2.PackageLoader("gobrrr.show", "templates"),
            autoescape=True, undefined=jinja2.StrictUndefined,
            trim_blocks=True, lstrip_blocks=True)
        _env.globals.update(fmt_s=fmt_s, pct=fmt_pct, regime_colors=REGIME_COLORS,
                            headline=verdict_headline)
    return _env


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-") or "section"


def table(columns: Sequence[str], rows: Sequence[Sequence[Cell]], *, sortable: bool = True,
          text_columns: Sequence[int] = (0,), name_columns: Sequence[int] = ()) -> Markup:
    """An HTML table; every cell escaped. `text_columns` are left-aligned,
    `name_columns` monospace (user-code names: ops, modules, files)."""
    from markupsafe import Markup, escape

    def cls(i: int) -> str:
        if i in name_columns:
            return ' class="name"'
        return ' class="t"' if i in text_columns else ""

    head = "".join(f"<th{cls(i)}>{escape(c)}</th>" for i, c in enumerate(columns))
    body = []
    for row in rows:
        cells = []
        for i, cell in enumerate(row):
            text, key = cell if isinstance(cell, tuple) else (cell, cell)
            key = "" if key is None else key
            cells.append(f'<td{cls(i)} data-v="{escape(key)}">{escape(text)}</td>')
        body.append("<tr>" + "".join(cells) + "</tr>")
    kind = ' class="sortable"' if sortable else ""
    return Markup(f"<table{kind}><thead><tr>{head}</tr></thead>"  # noqa: S704 - escaped
                  f"<tbody>{''.join(body)}</tbody></table>")


def figure(svg: str, caption: str = "") -> Markup:
    """Our own matplotlib SVG (built from numbers; user names only inside escaped
    <title>s, see figures.svg_of) with an escaped caption."""
    from markupsafe import Markup, escape

    cap = f'<figcaption class="note">{escape(caption)}</figcaption>' if caption else ""
    return Markup(f"<figure>{svg}{cap}</figure>")  # noqa: S704 - our SVG, escaped caption


def paragraph(text: str, cls: str = "") -> Markup:
    from markupsafe import Markup, escape

    attr = f' class="{escape(cls)}"' if cls else ""
    return Markup(f"<p{attr}>{escape(text)}</p>")  # noqa: S704 - escaped


def render_page(title: str, sections: Sequence[Section], *, subtitle: str = "",
                footer: str = "", standalone: bool = True) -> str:
    """The whole page (standalone) or a fragment for Jupyter: the same markup, styles
    scoped under .gobrrr-report so they do not leak into the notebook."""
    ids: set[str] = set()
    for s in sections:  # ids must be unique: the nav links to them
        base = s.id or _slug(s.title)
        s.id, n = base, 2
        while s.id in ids:
            s.id, n = f"{base}-{n}", n + 1
        ids.add(s.id)
    return environment().get_template("page.html.j2").render(
        title=title, subtitle=subtitle, footer=footer, sections=list(sections),
        standalone=standalone)
