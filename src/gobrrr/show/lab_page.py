"""A lab run as figures (matplotlib, Agg canvas, no pyplot state) and one self-contained
HTML page (the shared page builder, show/page.py). Measures nothing."""

from __future__ import annotations

import io
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from gobrrr.lab import LabReport
    from gobrrr.lab.common import LabResult

__all__ = ["figure", "svg", "write_plots", "render_html"]


def _plot_into(result: LabResult, axes: Any) -> None:
    from gobrrr.lab import experiment_module

    experiment_module(result.name).plot(result, axes)


def figure(results: list[LabResult]) -> Any:
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
    fig = figure(report.results)
    paths = [out_dir / "lab.svg", out_dir / "lab.png"]
    fig.savefig(paths[0], format="svg", metadata={"Date": None})
    fig.savefig(paths[1], format="png", dpi=80)
    return paths


_TEMPLATE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8">
<title>gobrrr lab: {{ fp.get('name', report.device) }}</title>
<style>
body{font-family:system-ui,sans-serif;max-width:1100px;margin:2em auto;padding:0 1em;color:#222}
table{border-collapse:collapse;margin:.5em 0}td,th{border:1px solid #ccc;padding:2px 8px;
text-align:right}td:first-child,th:first-child{text-align:left}.agrees{color:#080}
.differs{color:#b00}.na{color:#777}.note{color:#666;font-size:90%}svg{max-width:100%;height:auto}
</style></head><body>
<h1>gobrrr lab</h1>
<p>{{ fp.get('name', report.device) }} ({{ report.device }}), torch {{ fp.get('torch') }},
python {{ fp.get('python') }}{% if report.quick %}, quick sizes{% endif %};
started {{ report.started_at }}, {{ '%.1f' % report.wall_s }} s.
Ceilings: {% for d, v in report.ceilings['peak_flops_per_s'].items() %}matmul {{ d }}
{{ '%.3g' % (v / 1e12) }} TFLOP/s, {% endfor %}copy
{{ '%.3g' % (report.ceilings['bandwidth_bytes_per_s'] / 1e9) }} GB/s, eager op
{{ '%.3g' % (report.ceilings['op_overhead_s'] * 1e6) }} us.</p>
<p class="note">Essay numbers: {{ essay_source }}.</p>
<h2>Conclusions</h2><ul>
{% for r in report.results %}<li><b>{{ r.name }}</b>
<span class="{{ cls[r.agrees_with_essay] }}">[{{ word[r.agrees_with_essay] }}]</span>
{{ r.conclusion }}</li>{% endfor %}
{% for name, err in report.errors.items() %}<li><b>{{ name }}</b> failed: {{ err }}</li>
{% endfor %}</ul>
{% for item in items %}{% set r = item.result %}
<h2 id="{{ r.name }}">{{ r.name }}: {{ r.title }}</h2>
<p><b>Conclusion</b> <span class="{{ cls[r.agrees_with_essay] }}">[{{ word[r.agrees_with_essay]
}}]</span>: {{ r.conclusion }}</p>
{{ item.svg }}
<table><tr>{% for c in item.cols %}<th>{{ c }}</th>{% endfor %}</tr>
{% for row in item.rows %}<tr>{% for cell in row %}<td>{{ cell }}</td>{% endfor %}</tr>
{% endfor %}</table>
<table><tr><th>essay claim</th><th>essay (A100)</th></tr>
{% for e in r.essay %}<tr><td>{{ e.what }}</td><td>{{ e.essay }}</td></tr>{% endfor %}
</table>
{% for n in r.notes %}<p class="note">note: {{ n }}</p>{% endfor %}
{% endfor %}
</body></html>
"""


def render_html(report: LabReport) -> str:
    """One self-contained page: every string autoescaped; only matplotlib's own SVG
    (built from our numbers) is inserted as markup."""
    import jinja2
    from markupsafe import Markup

    from gobrrr.lab.common import ESSAY_SOURCE

    env = jinja2.Environment(autoescape=True, undefined=jinja2.StrictUndefined)
    items = []
    for r in report.results:
        cols, rows = r.table()
        items.append({"result": r, "cols": cols, "rows": rows,
                      "svg": Markup(svg(figure([r])))})  # noqa: S704 - our own SVG
    return env.from_string(_TEMPLATE).render(
        report=report, fp=report.fingerprint, items=items, essay_source=ESSAY_SOURCE,
        cls={True: "agrees", False: "differs", None: "na"},
        word={True: "agrees", False: "differs", None: "n/a"})
