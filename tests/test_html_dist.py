"""The doctor HTML report's distributed section, from a saved distributed report (a
2-rank gloo run of examples:ddp_comm on the CPU, report schema 1.6)."""

import gzip
import json
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
