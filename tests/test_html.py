"""The HTML report: self-contained, verdict first, every user string escaped, figures
inline, the same content for Jupyter."""

import copy
import json
import re

import pytest
from click.testing import CliRunner
from markupsafe import escape

from gobrrr.cli import cli
from gobrrr.show import Section, render_page, render_report, table
from gobrrr.show.figures import plottable_rows, roofline_svg

HOSTILE_OP = "aten::<script>alert('op')</script>"
HOSTILE_MODULE = "</td><img src=x onerror=alert(1)>$x^2$"


@pytest.fixture(scope="module")
def doctor_run(tmp_path_factory, calibrated_cache):
    """One `gobrrr doctor --html --json` run on CPU, shared by the tests here."""
    tmp = tmp_path_factory.mktemp("html")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("XDG_CACHE_HOME", str(calibrated_cache))  # the session's calibration
        r = CliRunner().invoke(cli, [
            # The transformer block: several op kinds, each long enough (tens of us and
            # more) to be timed above the empty-op cost on a noisy 2-core CPU (the
            # tiny MLP's ops can all fall under it, leaving nothing to plot).
            "doctor", "examples:transformer", "--device", "cpu", "--json", "-q",
            "--time-budget", "0.2", "--html", str(tmp / "out" / "mlp.html")])
    assert r.exit_code == 0, r.output
    return json.loads(r.stdout), (tmp / "out" / "mlp.html").read_text(encoding="utf-8")


def hostile(d):
    """The report with user-code names that would break unescaped HTML or SVG."""
    d = copy.deepcopy(d)
    d["workload"]["name"] = "evil.py:<b>make</b>&co"
    ops = d["budget"]["per_op"]
    plottable, _ = plottable_rows(ops)
    ops[plottable[0]]["name"] = HOSTILE_OP
    d["budget"]["per_module"][0]["name"] = HOSTILE_MODULE
    d["notes"].append("file </p><script>alert('note')</script>")
    return d


def test_doctor_writes_a_self_contained_page(doctor_run):
    _, page = doctor_run
    assert page.startswith("<!doctype html>")
    # No fetch of anything: no external scripts, styles, images, fonts or imports. (SVG's
    # xmlns="http://www.w3.org/2000/svg" is a namespace name, not a fetch.)
    assert not re.search(r"<(script|img|link|iframe)[^>]*\s(src|href)=", page)
    assert "@import" not in page and "url(http" not in page
    fetched = re.findall(r"(?:src|href)=\"(https?:[^\"]*)\"", page)
    assert fetched == []
    assert page.count("<svg") == 3  # budget bar, roofline, batch scaling (CPU has it)


def test_verdict_comes_first(doctor_run):
    d, page = doctor_run
    regime = d["verdict"]["regime"]
    # the banner names the regime ("MEMORY-BOUND", or "MEMORY- OR ..." when uncertain)
    banner = page.index(f'<div class="verdict {regime}">')
    assert page[banner:].split(">", 1)[1].startswith(regime.upper() + "-")
    order = [banner, page.index('id="budget"'),
             page.index('id="roofline"'), page.index('id="experiments"'),
             page.index('id="ops"'), page.index('id="modules"'),
             page.index('id="remedies"'), page.index('id="machine"')]
    assert order == sorted(order)
    for line in d["verdict"]["evidence"]:
        assert str(escape(line)) in page


def test_machine_and_stack_are_named(doctor_run):
    d, page = doctor_run
    fp = d["machine"]["fingerprint"]
    machine = page[page.index('id="machine"'):]
    for value in (fp["torch"], fp["python"], fp["name"], d["created"],
                  d["machine"]["measured_at"]):
        assert value in machine


def test_every_user_string_is_escaped(doctor_run):
    d = hostile(doctor_run[0])
    page = render_report(d)
    for raw in ("<script>alert", "<img src=x", "<b>make</b>"):
        assert raw not in page
    assert "aten::&lt;script&gt;alert(&#39;op&#39;)&lt;/script&gt;" in page
    assert "&lt;/td&gt;&lt;img src=x onerror=alert(1)&gt;$x^2$" in page
    assert "evil.py:&lt;b&gt;make&lt;/b&gt;&amp;co" in page
    # The only <script> is our own sorter.
    assert page.count("<script") == 1


def test_roofline_dots_have_escaped_hover_names(doctor_run):
    d = hostile(doctor_run[0])
    svg = roofline_svg(d["budget"]["per_op"], d["machine"])
    on, _ = plottable_rows(d["budget"]["per_op"])
    titles = re.findall(r"<title>(.*?)</title>", svg)
    assert len(titles) == len(on)  # one hover text per dot
    assert any("aten::&lt;script&gt;" in t for t in titles)
    assert "<script>" not in svg


def test_roofline_roofs_are_the_measured_ceilings(doctor_run):
    d, _ = doctor_run
    svg = roofline_svg(d["budget"]["per_op"], d["machine"])
    for dtype in d["machine"]["peak_flops_per_s"]:
        assert f">{dtype} " in svg  # one labelled roof per measured dtype
    bw = d["machine"]["bandwidth_bytes_per_s"]
    assert f"memory {bw / 1e9:.3g} GB/s" in svg


def test_per_op_table_numbers(doctor_run):
    d = copy.deepcopy(doctor_run[0])
    b = d["budget"]
    b["overhead_s"], b["memory_s"], b["compute_s"] = 1e-3, 2e-3, 1e-3
    b["parts_s"] = {"overhead": 1e-3, "memory": 2e-3, "compute": 1e-3}
    b["total_s"] = 4e-3  # the page's "% of T" divides by the budget's T, never re-adds
    row = b["per_op"][0]
    row.update(time_s=1e-3, flops=2_000_000, bytes=500_000, calls=4,
               intensity_flops_per_byte=4.0, roofline_fraction=0.125, below_roof=True,
               roof_band="<25%", limit="bytes",
               bound="memory", achieved_bytes_per_s=5e8)
    page = render_report(d)
    ops = page[page.index('id="ops"'):page.index('id="modules"')]
    # 1 ms of a 4 ms total = 25.0%; 2e6 FLOPs / 5e5 B = 4 FLOP/B; 5e8 B/s = 500 MB/s.
    cells = re.findall(r'<td[^>]*data-v="([^"]*)"[^>]*>([^<]*)</td>', ops)[:11]
    texts = [t for _, t in cells]
    assert texts[:8] == ["1", row["name"], "4", "1 ms", "25.0%", "2 M", "500 kB", "4"]
    assert texts[8] == "500 MB/s" and texts[9] == "12% (below)"
    assert cells[3][0] == "0.001"  # sorts by seconds, not by text


def test_remedy_gain_measured_by_graph_replay(doctor_run):
    d = copy.deepcopy(doctor_run[0])
    # joined by the catalog remedy ("spec"), never by the name's words
    d["remedies"] = [{"name": "CUDA graphs", "regime": "overhead", "predicted_speedup": 2.5,
                      "basis": "b", "how": "h", "spec": "cuda_graphs"},
                     {"name": "torch.compile", "regime": "memory",
                      "predicted_speedup": 1.3, "basis": "b", "how": "h",
                      "measured_speedup": 1.21, "spec": "compile"},
                     {"name": "CUDA graphs renamed", "regime": "overhead",
                      "predicted_speedup": 2.4, "basis": "b", "how": "h", "spec": "other"}]
    d["experiments"]["graph_replay"] = {"possible": True, "reason": None, "eager_s": 3e-3,
                                        "replay_s": 1.5e-3, "speedup": 2.0,
                                        "predicted_speedup": 2.5, "agrees": True}
    page = render_report(d)
    rem = page[page.index('id="remedies"'):page.index('id="notes"')]
    assert re.search(r">2.50x<.*>2.00x<.*graph-replay experiment", rem)
    assert re.search(r">1.30x<.*>1.21x<.*gobrrr optimize", rem)
    assert re.search(r">2.40x<.*not yet", rem)  # a name starting "CUDA graphs" is not it
    assert "eager 3 ms, graph replay 1.5 ms" in page


@pytest.mark.serial
def test_jupyter_repr_is_the_same_report_as_a_fragment(doctor_run):
    d, page = doctor_run
    frag = render_report(d, standalone=False)
    assert "<html" not in frag and "<body" not in frag
    assert 'class="gobrrr-report"' in frag
    start = page.index('<div class="gobrrr-report">')
    assert frag.strip() == page[start:page.rindex("</div>") + 6].strip()


def test_show_functions_take_a_report_or_its_dict(tmp_path):
    import gobrrr.show
    from gobrrr import diagnose
    from gobrrr.examples import mlp
    from gobrrr.report import Report

    fn, args = mlp(1)
    rep = diagnose(fn, *args, experiments=False, time_budget_s=0.1)
    # The report is data: its dict has one row per op call, the trace's only input.
    assert len(rep.to_dict()["budget"]["per_call"]) == len(rep.counts.records)
    # ... and renders nothing itself: the renderers are gobrrr.show's
    assert not {"save_html", "save_trace", "_repr_html_"} & set(dir(Report))
    gobrrr.show.save_html(rep, str(tmp_path / "r.html"))
    page = (tmp_path / "r.html").read_text()
    assert gobrrr.show.html(rep) in page
    assert gobrrr.show.html(rep.to_dict()) == gobrrr.show.html(rep)
    assert "not run (--no-experiments)" in page
    gobrrr.show.save_trace(rep.to_dict(), tmp_path / "t.json")
    trace = json.loads((tmp_path / "t.json").read_text())
    assert trace["otherData"]["gobrrr.workload"] == rep.workload["name"]


def test_render_page_is_reusable():
    body = table(["name", "time"], [["<op>", ("1 ms", 0.001)]])
    page = render_page("lab & co", [Section("", "Results", body),
                                     Section("", "Results", body)], subtitle="<sub>")
    assert "<title>lab &amp; co</title>" in page and "&lt;sub&gt;" in page
    assert 'id="results"' in page and 'id="results-2"' in page  # unique anchors
    assert '<td class="t" data-v="&lt;op&gt;">&lt;op&gt;</td>' in page
