"""The doctor HTML report's distributed section, from a saved distributed report (a
2-rank gloo run of examples:ddp_comm on the CPU, report schema 1.6)."""

import gzip
import json
import re
from pathlib import Path

from gobrrr.schema import validate
from gobrrr.show import render_report

DATA = Path(__file__).parent / "data" / "dist"


def _report():
    return json.loads(gzip.open(DATA / "gloo_ddp_comm_report.json.gz", "rt").read())


def test_distributed_section_renders_every_part():
    d = _report()
    validate(d)
    page = render_report(d)
    assert 'id="distributed"' in page
    # budget bar, roofline, one stacked bar per rank, the projection
    assert page.count("<svg") == 4
    dd = d["distributed"]
    for r in dd["ranks"]:
        assert f"rank {r['rank']}" in page
        cmp = r["no_sync_comparison"]
        assert f"{100 * cmp['bound_fraction']:.1f}%" in page  # the no_sync bound, shown
    assert "Against the no_sync bound" in page and "Collectives" in page
    assert "Projection beyond this host" in page and "Topology" in page
    assert "calibrate --distributed" in page  # no ceilings cached in that run: said so


def test_single_process_report_has_no_distributed_section():
    d = _report()
    del d["distributed"]
    assert 'id="distributed"' not in render_report(d)


def test_budget_shows_four_parts_that_sum_to_t():
    # A 1.6 report, saved before the budget carried total_s and parts_s: its parts are
    # the four its fractions name (show/budget_view.budget_parts).
    d = _report()
    page = render_report(d)
    line = page[page.index('<p class="budget-sum"'):]
    line = line[:line.index("</p>")]
    total_s = float(re.search(r'data-total-s="([^"]+)"', line).group(1))
    parts_s = {k: float(s) for k, s in re.findall(r'class="tag (\w+)" data-s="([^"]+)"',
                                                  line)}
    assert parts_s == {"overhead": 0.013107770750879301, "memory": 0.00219130839791796,
                       "compute": 0.0, "communication": 0.014457406351204613}
    # 13.108 + 2.191 + 0 + 14.457 ms = 29.756 ms: the parts shown add up to T, which is
    # the budget's T_wall (exactly: the same additions in the same order as Budget.total_s)
    assert sum(parts_s.values()) == total_s == d["budget"]["wall_s"]
    assert "29.8 ms per call =" in line and "communication 14.5 ms</span>." in line
    # the verdict: the total of four parts (not of three: 15.3 ms), in its own colour
    assert ('<div class="verdict communication">COMMUNICATION-BOUND: '
            '49% of 29.8 ms per call</div>') in page
    assert ".gobrrr-report .communication{background:#d55e00}" in page
    # the bar: the four shares the budget gives (44% + 7% + 0% + 49%), communication drawn
    bar = page[page.index('id="budget"'):page.index('<p class="budget-sum"')]
    labels = re.findall(r"<text[^>]*>([a-z]+ \d+%)</text>", bar)
    assert labels == ["overhead 44%", "memory 7%", "communication 49%"]  # 0%: no room
