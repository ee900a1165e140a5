"""Every --json output validates against its schema in src/gobrrr/schema/, and the schema
rejects what it should (a schema that accepts anything cannot fail)."""

import copy
import json

import pytest
from click.testing import CliRunner

from gobrrr import report as report_mod
from gobrrr.cli import cli
from gobrrr.schema import SchemaError, kind_of, load_schema, validate


@pytest.fixture(scope="module")
def outputs(tmp_path_factory):
    """doctor, calibrate and lab --json, each run once (CPU, short budgets)."""
    cache = tmp_path_factory.mktemp("cache")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("XDG_CACHE_HOME", str(cache))
        runner = CliRunner()
        out = {}
        for kind, args in (
            ("ceilings", ["calibrate", "--device", "cpu", "--json", "-q"]),
            ("report", ["doctor", "examples:mlp", "--device", "cpu", "--json", "-q",
                        "--time-budget", "0.2"]),
            ("lab", ["lab", "overhead", "--quick", "--device", "cpu", "--json", "-q"]),
        ):
            r = runner.invoke(cli, args)
            assert r.exit_code == 0, r.output
            out[kind] = json.loads(r.stdout)
    return out


@pytest.mark.parametrize("kind", ["report", "ceilings", "lab"])
def test_every_json_output_validates(outputs, kind):
    assert kind_of(outputs[kind]) == kind
    validate(outputs[kind])  # raises on any mismatch
    validate(outputs[kind], kind)


def test_schema_version_matches_code():
    schema = load_schema("report")
    assert schema["properties"]["schema"]["const"] == "gobrrr.report"
    # The schema file is for major version 1; the code's version must be a 1.x.
    assert report_mod.SCHEMA_VERSION.startswith("1.")
    assert schema["$id"].endswith(":" + report_mod.SCHEMA_VERSION)


def test_experiments_none_validates(outputs):
    d = copy.deepcopy(outputs["report"])
    d["experiments"] = {"batch_scaling": None, "graph_replay": None}
    validate(d, "report")


@pytest.mark.parametrize("path, value, where", [
    (("regime",), "slow", "regime"),
    (("budget", "per_op", 0, "bound"), "fast", "budget/per_op/0/bound"),
    (("budget", "per_op", 0, "roof_band"), "10-20%", "budget/per_op/0/roof_band"),
    (("budget", "per_op", 0, "limit"), "tensor", "budget/per_op/0/limit"),
    (("budget", "per_call", 0, "limit"), "cpu", "budget/per_call/0/limit"),
    (("budget", "low_roof_s"), -1.0, "budget/low_roof_s"),
    (("timing", "median_s"), -1.0, "timing/median_s"),
    (("machine", "peak_flops_per_s"), {}, "machine/peak_flops_per_s"),
    (("schema_version",), "2.0", "schema_version"),
    (("counts", "total_flops"), 1.5, "counts/total_flops"),
])
def test_schema_rejects_bad_fields(outputs, path, value, where):
    d = copy.deepcopy(outputs["report"])
    target = d
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = value
    with pytest.raises(SchemaError, match=f"at {where}:"):
        validate(d)


def test_missing_required_field_is_rejected(outputs):
    d = copy.deepcopy(outputs["report"])
    del d["verdict"]
    with pytest.raises(SchemaError, match="'verdict' is a required property"):
        validate(d)


def test_not_a_gobrrr_document():
    with pytest.raises(SchemaError, match="not a gobrrr JSON document"):
        validate({"hello": 1})
    assert kind_of([1, 2]) is None


def test_ceilings_schema_rejects_zero_bandwidth(outputs):
    d = copy.deepcopy(outputs["ceilings"])
    d["bandwidth_bytes_per_s"] = 0
    with pytest.raises(SchemaError, match="bandwidth_bytes_per_s"):
        validate(d, "ceilings")


def test_ceilings_records_each_bandwidth_probe(outputs):
    d = outputs["ceilings"]
    assert d["schema_version"] == 3
    assert d["bandwidth_by_kernel"][d["bandwidth_kernel"]] == d["bandwidth_bytes_per_s"]


def test_ceilings_record_the_element_wise_math_rates(outputs):
    d = outputs["ceilings"]
    for key in ("exp_elems_per_s", "softmax_elems_per_s"):
        assert "fp32" in d[key] and all(v > 0 for v in d[key].values())
    assert d["details"]["math_row"] == 4096


@pytest.mark.parametrize("field, value", [
    ("bandwidth_by_kernel", {"sum": -1.0}),
    ("bandwidth_by_kernel", {"sum": "fast"}),
    ("bandwidth_kernel", 3),
    ("op_overhead_s", -1e-6),
    ("python_ops_per_s", "fast"),
    ("schema_version", 4),
    ("softmax_elems_per_s", {"fp32": 0}),
    ("exp_elems_per_s", {"bf16": "fast"}),
])
def test_ceilings_schema_rejects_bad_fields(outputs, field, value):
    d = copy.deepcopy(outputs["ceilings"])
    d[field] = value
    with pytest.raises(SchemaError, match=field):
        validate(d, "ceilings")


def test_ceilings_versions_2_and_3_require_the_probes(outputs):
    for version in (2, 3):
        d = copy.deepcopy(outputs["ceilings"]) | {"schema_version": version}
        del d["bandwidth_by_kernel"]
        with pytest.raises(SchemaError,
                           match="'bandwidth_by_kernel' is a required property"):
            validate(d, "ceilings")


def test_ceilings_version_3_requires_the_math_rates_version_2_does_not(outputs):
    d = copy.deepcopy(outputs["ceilings"])
    del d["softmax_elems_per_s"]
    with pytest.raises(SchemaError, match="'softmax_elems_per_s' is a required property"):
        validate(d, "ceilings")
    d["schema_version"] = 2
    del d["exp_elems_per_s"]
    validate(d, "ceilings")  # reports written before version 3 embed such ceilings


def test_ceilings_version_1_still_validates(outputs):
    # Reports written before version 2 embed version-1 ceilings; `gobrrr compare` reads them.
    d = copy.deepcopy(outputs["ceilings"])
    for key in ("bandwidth_by_kernel", "bandwidth_kernel"):
        del d[key]
    d["schema_version"] = 1
    validate(d, "ceilings")
    report = copy.deepcopy(outputs["report"])
    report["machine"] = d
    validate(report, "report")


def test_ceilings_schema_version_matches_code():
    from gobrrr import hardware

    schema = load_schema("ceilings")
    assert hardware.SCHEMA_VERSION == max(schema["properties"]["schema_version"]["enum"])
    assert schema["if"]["properties"]["schema_version"]["const"] == hardware.SCHEMA_VERSION
