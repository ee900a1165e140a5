"""`gobrrr compare`: what changed, and the CI gate's exit codes."""

import copy
import json

import pytest
from click.testing import CliRunner

from gobrrr.cli import cli
from gobrrr.compare import compare, parse_percent
from gobrrr.errors import UserError


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("compare")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("XDG_CACHE_HOME", str(tmp / "cache"))
        r = CliRunner().invoke(cli, ["doctor", "examples:mlp", "--device", "cpu", "--json",
                                     "-q", "--no-experiments", "--time-budget", "0.2"])
    assert r.exit_code == 0, r.output
    d = json.loads(r.stdout)
    d["timing"]["median_s"] = 100e-6
    d["timing"]["rel_iqr"] = 0.01
    return d


def slower(d, factor):
    d = copy.deepcopy(d)
    d["timing"]["median_s"] *= factor
    return d


def run_compare(tmp_path, old, new, *args):
    (tmp_path / "old.json").write_text(json.dumps(old))
    (tmp_path / "new.json").write_text(json.dumps(new))
    return CliRunner().invoke(cli, ["compare", str(tmp_path / "old.json"),
                                    str(tmp_path / "new.json"), *args])


def test_parse_percent():
    assert parse_percent("5%") == 0.05
    assert parse_percent("5") == 0.05
    assert parse_percent(" 12.5 % ") == 0.125
    with pytest.raises(UserError, match="percentage"):
        parse_percent("five")
    with pytest.raises(UserError, match="negative"):
        parse_percent("-1%")


@pytest.mark.parametrize("factor, args, code", [
    (1.0, [], 0),
    (1.04, [], 0),                          # 4% < the default 5%
    (1.10, [], 1),                          # 10% > 5%: the gate fails
    (1.10, ["--fail-above", "15%"], 0),
    (1.10, ["--fail-above", "9"], 1),
    (0.50, [], 0),                          # faster never fails
])
def test_gate_exit_codes(tmp_path, base, factor, args, code):
    r = run_compare(tmp_path, base, slower(base, factor), *args)
    assert r.exit_code == code, r.output
    if code == 1:
        assert "NEW is 10.0% slower than OLD" in r.stderr


def test_comparison_numbers(base):
    new = slower(base, 1.2)
    name = base["budget"]["per_op"][0]["name"]
    new["budget"]["per_op"][0]["time_s"] = 1.5 * base["budget"]["per_op"][0]["time_s"]
    new["budget"]["per_op"].append(dict(base["budget"]["per_op"][0], name="aten::new_op",
                                        time_s=1.0))
    new["fractions"] = {"overhead": 0.1, "memory": 0.2, "compute": 0.7}
    new["regime"] = "compute"
    c = compare(base, new, fail_above=0.05)
    # 120 us / 100 us - 1 = 0.2; IQRs 1% + 1% = 2% of noise.
    assert c.change == pytest.approx(0.2) and c.regressed and not c.within_noise
    assert c.noise == pytest.approx(0.02)
    ops = {o.name: o for o in c.ops}
    assert ops[name].ratio == pytest.approx(1.5)
    assert c.ops[0].name == "aten::new_op" and c.ops[0].old_s is None  # biggest first
    assert (c.old_regime, c.new_regime) == (base["regime"], "compute")
    d = c.to_dict()
    assert d["regressed"] is True and d["change"] == pytest.approx(0.2)


def test_output_and_json(tmp_path, base):
    r = run_compare(tmp_path, base, slower(base, 1.2), "--json", "-q")
    assert r.exit_code == 1 and r.stderr == ""
    d = json.loads(r.stdout)
    assert d["regressed"] is True and d["new_wall_s"] == pytest.approx(120e-6)
    r = run_compare(tmp_path, base, slower(base, 1.2))
    assert "T_wall 100 us -> 120 us: 20.0% slower" in r.stdout
    assert "regime split" in r.stdout and "top ops" in r.stdout


def test_different_machines_are_flagged(base):
    new = copy.deepcopy(base)
    new["machine"]["fingerprint"]["torch"] = "9.9.9"
    c = compare(base, new)
    assert any("different machines or software stacks" in n and "9.9.9" in n
               for n in c.notes)


def test_bad_inputs_are_one_line_errors(tmp_path, base):
    (tmp_path / "bad.json").write_text("{not json")
    (tmp_path / "ok.json").write_text(json.dumps(base))
    broken = copy.deepcopy(base)
    broken["regime"] = "slow"
    (tmp_path / "broken.json").write_text(json.dumps(broken))
    for other, match in (("bad.json", "is not JSON"), ("missing.json", "cannot read"),
                         ("broken.json", "does not match its schema at regime")):
        r = CliRunner().invoke(cli, ["compare", str(tmp_path / "ok.json"),
                                     str(tmp_path / other)])
        assert r.exit_code == 2, r.output
        lines = [x for x in r.output.splitlines() if x.strip()]
        assert len(lines) == 1 and match in lines[0], r.output
