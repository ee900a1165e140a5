"""`gobrrr compare`: what changed, the CI gate's statistic and its exit codes."""

import copy
import json
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from gobrrr.cli import cli
from gobrrr.compare import (
    FAR_ABOVE,
    MIN_RUNS,
    MIN_SAMPLES,
    compare,
    parse_percent,
    ratio_interval,
    runs_interval,
    t_quantile,
)
from gobrrr.errors import UserError
from gobrrr.timing import summarize

US = 1e-6
ROOT = Path(__file__).resolve().parents[1]


def with_samples(d, samples):
    """A copy of report `d` whose timing is `samples` (seconds), its summary consistent."""
    samples = [float(s) for s in samples]
    d = dict(d)
    med, iqr, lo, hi = summarize(samples) if samples else (d["timing"]["median_s"], 0, 0, 0)
    d["timing"] = dict(d["timing"], samples_s=samples, n_samples=max(1, len(samples)),
                       median_s=med, iqr_s=iqr, min_s=lo, max_s=hi, rel_iqr=iqr / med)
    return d


@pytest.fixture(scope="module")
def base(calibrated_cache):
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("XDG_CACHE_HOME", str(calibrated_cache))  # the session's calibration
        r = CliRunner().invoke(cli, ["doctor", "examples:mlp", "--device", "cpu", "--json",
                                     "-q", "--no-experiments", "--time-budget", "0.2"])
    assert r.exit_code == 0, r.output
    # 21 quiet samples, 99.5 us to 100.5 us: median 100 us, IQR 0.5%.
    return with_samples(json.loads(r.stdout), 100 * US * np.linspace(0.995, 1.005, 21))


def slower(d, factor):
    return with_samples(copy.deepcopy(d), [s * factor for s in d["timing"]["samples_s"]])


def run_compare(tmp_path, old, new, *args):
    (tmp_path / "old.json").write_text(json.dumps(old))
    (tmp_path / "new.json").write_text(json.dumps(new))
    return CliRunner().invoke(cli, ["compare", str(tmp_path / "old.json"),
                                    str(tmp_path / "new.json"), *args])


# --- pure helpers --------------------------------------------------------------------------

def test_parse_percent():
    assert parse_percent("5%") == 0.05
    assert parse_percent("5") == 0.05
    assert parse_percent(" 12.5 % ") == 0.125
    assert parse_percent("0.05") == 0.0005  # a percentage, not a fraction
    assert parse_percent("0%") == 0.0
    for bad in ("five", "", "%", "nan", "inf"):
        with pytest.raises(UserError, match="percentage"):
            parse_percent(bad)
    with pytest.raises(UserError, match="negative"):
        parse_percent("-1%")


def test_ratio_interval_exact_cases():
    # No spread: every resample has the same median, so the interval is the point.
    assert ratio_interval([1.0, 1.0, 1.0], [1.25, 1.25, 1.25]) == (1.25, 1.25)
    assert ratio_interval([2.0] * 50, [1.0] * 7) == (0.5, 0.5)
    # Too few samples, or samples that cannot be a time: no interval.
    assert MIN_SAMPLES == 3
    assert ratio_interval([1.0, 1.0], [1.0, 1.0, 1.0]) is None
    assert ratio_interval([1.0, 1.0, 1.0], []) is None
    assert ratio_interval([1.0, 0.0, 1.0], [1.0, 1.0, 1.0]) is None
    assert ratio_interval([1.0, float("nan"), 1.0], [1.0, 1.0, 1.0]) is None


def test_ratio_interval_is_deterministic_and_unit_free():
    rng = np.random.default_rng(7)
    a, b = rng.lognormal(0, 0.2, 30), rng.lognormal(0, 0.2, 40)
    lo, hi = ratio_interval(a, b)
    assert ratio_interval(a, b) == (lo, hi)  # fixed seed: one answer per input
    assert lo < np.median(b) / np.median(a) < hi
    lo_ms, hi_ms = ratio_interval(a * 1e3, b * 1e3)  # seconds or ms: same ratios
    assert (lo_ms, hi_ms) == pytest.approx((lo, hi), rel=1e-12)
    lo90, hi90 = ratio_interval(a, b, confidence=0.90)
    assert lo < lo90 < hi90 < hi


# --- the statistic on recorded samples -----------------------------------------------------
# Pairs of sample sets drawn from ONE distribution with a 20% relative spread, as noisy
# back-to-back runs record them. Sizes as the timer produces: 5 (its minimum) to 100 (its
# maximum, which a noisy workload reaches when the time budget allows). One run a side:
# the within-run interval is kept and shown, but time fails only beyond FAR_ABOVE.

def draw(rng, dist, n, factor=1.0):
    if dist == "lognormal":
        x = rng.lognormal(0.0, 0.2, n)
    else:
        x = np.maximum(rng.normal(1.0, 0.2, n), 0.05)  # P(clipped) ~ 1e-6
    return 100 * US * factor * x


def gate(base, old, new, fail_above=0.05):
    return compare(with_samples(base, old), with_samples(base, new), fail_above=fail_above)


@pytest.mark.parametrize("dist, seed", [("lognormal", 11), ("normal", 12)])
def test_same_distribution_passes_the_gate(base, dist, seed):
    rng = np.random.default_rng(seed)
    passed = medians_failed = 0
    for _ in range(100):
        n_old, n_new = rng.integers(5, 101, size=2)
        c = gate(base, draw(rng, dist, n_old), draw(rng, dist, n_new))
        assert c.change_low is not None and c.change_low <= c.change <= c.change_high
        passed += not c.regressed
        medians_failed += c.change > 0.05  # the 1.0 gate: two medians and a threshold
    assert passed == 100, passed
    # The pairs are as noisy as the runs that made the median gate cry wolf.
    assert medians_failed >= 10, medians_failed


@pytest.mark.parametrize("dist, seed", [("lognormal", 21), ("normal", 22)])
def test_one_run_a_side_sees_a_slowdown_but_does_not_fail_on_it(base, dist, seed):
    # 100 samples per run: the within-run interval clears +5% for a 20% slowdown in ~95-97%
    # of pairs (other seeds give 93-99 of 100; these, the first tried, 98). It is shown,
    # with a note, and fails nothing: it cannot tell the change from a shift between runs.
    rng = np.random.default_rng(seed)
    seen = failed = 0
    for _ in range(100):
        c = gate(base, draw(rng, dist, 100), draw(rng, dist, 100, factor=1.2))
        seen += c.change_low > 0.05
        failed += c.regressed
    assert seen >= 95 and failed == 0, (seen, failed)
    assert c.basis == "samples" and c.time_limit == FAR_ABOVE == 1.0
    assert any("--repeat 3" in n and "+100%" in n for n in c.notes)


def test_resampled_recorded_run(base):
    # The 100 samples of a real noisy run (examples:mlp on an H200, IQR 15% of the
    # median): pairs of runs resampled from it, 5 to 100 samples each, as back-to-back
    # runs of one workload; then NEW 20% slower, 100 samples each; then 2.5x slower.
    rec = json.loads((ROOT / "benchmarks/results/h200/doctor-mlp.json").read_text())
    s = np.array(rec["timing"]["samples_s"])
    rng = np.random.default_rng(41)
    passed = medians_failed = seen = failed = 0
    for _ in range(100):
        n_old, n_new = rng.integers(5, 101, size=2)
        c = gate(base, rng.choice(s, n_old), rng.choice(s, n_new))
        passed += not c.regressed
        medians_failed += c.change > 0.05
        seen += gate(base, rng.choice(s, 100), 1.2 * rng.choice(s, 100)).change_low > 0.05
        failed += gate(base, rng.choice(s, 100), 2.5 * rng.choice(s, 100)).regressed
    assert passed == 100 and medians_failed >= 10 and seen >= 95 and failed == 100, \
        (passed, medians_failed, seen, failed)


def test_significant_but_below_the_threshold_passes(base):
    c = gate(base, 100 * US * np.linspace(0.999, 1.001, 50),
             103 * US * np.linspace(0.999, 1.001, 50))
    assert c.significant and c.change_low > 0 and not c.regressed
    assert gate(base, c_old := 100 * US * np.linspace(0.999, 1.001, 50),
                c_old, fail_above=0.0).regressed is False


# --- time between runs: doctor --repeat, or several reports a side ------------------------

def with_runs(d, runs_s):
    """A copy of report `d` as `doctor --repeat` writes it: its own 5 samples around the
    first run's T_wall, and every process's T_wall in timing.runs_s."""
    d = with_samples(copy.deepcopy(d), [runs_s[0] * f for f in (0.99, 0.995, 1.0, 1.005,
                                                                 1.01)])
    d["timing"]["runs_s"] = [float(r) for r in runs_s]
    return d


def test_t_quantiles_and_the_runs_interval_exactly():
    # Student's t, two-sided 95%: the tables' 12.706 (df 1), 2.776 (df 4), 2.228 (df 10)
    assert t_quantile(0.975, 1) == pytest.approx(12.706, abs=1e-3)
    assert t_quantile(0.975, 4) == pytest.approx(2.776, abs=1e-3)
    assert t_quantile(0.975, 10) == pytest.approx(2.228, abs=1e-3)
    assert MIN_RUNS == 3
    assert runs_interval([1.0, 1.0], [1.0, 1.0, 1.0]) is None  # too few runs a side
    assert runs_interval([1.0] * 3, [1.25] * 4) == pytest.approx((1.25, 1.25))
    # logs of OLD: 0, 0, ln 1.21 (mean 0.0635, var 0.01210); NEW: ln 1.1 three times
    # (var 0): se = sqrt(0.01210 / 3), df = 2, t = 4.303
    lo, hi = runs_interval([1.0, 1.0, 1.21], [1.1, 1.1, 1.1])
    d, se = np.log(1.1) - np.log(1.21) / 3, np.sqrt(np.var(np.log([1, 1, 1.21]), ddof=1) / 3)
    assert (lo, hi) == pytest.approx((np.exp(d - 4.3027 * se), np.exp(d + 4.3027 * se)),
                                     rel=1e-4)


@pytest.mark.parametrize("seed", [51, 52])
def test_runs_gate_no_false_alarms_and_catches_a_20_percent_slowdown(base, seed):
    # Runs whose medians shift by 5% (lognormal sd) between runs, as a busy CPU's do; 5
    # runs a side. Identical: no failure in 100 pairs; 20% slower: caught in >= 95 of 100
    # (the interval's lower end clears +5% when the runs' mean shift is 20%).
    rng = np.random.default_rng(seed)
    false_alarms = caught = 0
    for _ in range(100):
        old = with_runs(base, 100 * US * rng.lognormal(0, 0.05, 5))
        c = compare(old, with_runs(base, 100 * US * rng.lognormal(0, 0.05, 5)))
        false_alarms += c.regressed
        caught += compare(old, with_runs(base, 120 * US * rng.lognormal(0, 0.05, 5))).regressed
    assert c.basis == "runs" and c.time_limit == 0.05 and "Welch" in c.method
    assert false_alarms == 0 and caught >= 95, (false_alarms, caught)


def test_several_reports_a_side_are_runs(tmp_path, base):
    olds = [with_samples(base, 100 * US * np.linspace(0.99, 1.01, 5) * f)
            for f in (1.0, 1.02, 0.98)]
    news = [with_samples(base, 110 * US * np.linspace(0.99, 1.01, 5) * f)
            for f in (1.0, 1.02, 0.98)]
    c = compare(olds, news)
    assert c.basis == "runs" and (c.old_reports, c.new_reports) == (3, 3)
    assert c.old_runs_s == pytest.approx([100 * US, 102 * US, 98 * US])
    assert c.change == pytest.approx(0.1) and c.time_regressed
    for side, docs in (("old", olds), ("new", news)):
        for k, d in enumerate(docs):
            (tmp_path / f"{side}{k}.json").write_text(json.dumps(d))
    paths = [",".join(str(tmp_path / f"{side}{k}.json") for k in range(3))
             for side in ("old", "new")]
    r = CliRunner().invoke(cli, ["compare", *paths])
    assert r.exit_code == 1, r.output
    assert "gate --fail-above 5%: FAIL: slower by at least" in r.stdout
    assert "(runs: 3, 3)" in r.stdout
    assert "NEW is 10.0% slower than OLD (95% interval +" in r.stderr


# --- work: what does not vary between runs ------------------------------------------------

def test_more_work_fails_the_gate_whatever_the_time(base):
    new = copy.deepcopy(base)
    new["counts"]["total_bytes"] = int(base["counts"]["total_bytes"] * 1.2)
    new["counts"]["ops"] = base["counts"]["ops"] + 1
    c = compare(base, new)  # the same timing: time says nothing
    assert not c.time_regressed and c.regressed
    names = [w.name for w in c.work_regressed]
    assert "bytes" in names and "FLOPs" not in names
    # one more op call fails when it is more than 5% of the calls
    assert ("op calls" in names) == (1 / base["counts"]["ops"] > 0.05)
    assert c.to_dict()["work_regressed"] == names
    less = copy.deepcopy(base)
    less["counts"]["total_flops"] = base["counts"]["total_flops"] // 2
    assert not compare(base, less).regressed  # less work never fails
    # a side whose reports disagree on a count: that count is not gated, and said so
    c = compare([base, new], [new])
    assert [w.old for w in c.work if w.name == "bytes"] == [None]
    assert any("the bytes of one side's reports differ: not gated" in n for n in c.notes)


# --- the gate's exit codes and output ------------------------------------------------------

@pytest.mark.parametrize("factor, args, code", [
    (1.0, [], 0),
    (1.10, [], 0),                          # one run a side: time fails only beyond +100%
    (2.5, [], 1),                           # beyond +100%: fails
    (2.5, ["--fail-above", "200%"], 0),     # a threshold above +100% is the limit then
    (0.50, [], 0),                          # faster never fails
])
def test_gate_exit_codes(tmp_path, base, factor, args, code):
    r = run_compare(tmp_path, base, slower(base, factor), *args)
    assert r.exit_code == code, r.output
    if code == 1:
        assert "NEW is 150.0% slower than OLD (95% interval +14" in r.stderr
        assert "low end above 100%" in r.stderr


@pytest.mark.parametrize("factor, args, code", [
    (1.04, [], 0),                          # 4% < the default 5%
    (1.10, [], 1),                          # 10% > 5%: the gate fails
    (1.10, ["--fail-above", "15%"], 0),
    (1.10, ["--fail-above", "8"], 1),       # the interval's low end is +8.8%
])
def test_gate_exit_codes_with_runs(tmp_path, base, factor, args, code):
    old = with_runs(base, 100 * US * np.array([0.995, 1.0, 1.005]))
    new = with_runs(base, 100 * US * factor * np.array([0.995, 1.0, 1.005]))
    r = run_compare(tmp_path, old, new, *args)
    assert r.exit_code == code, r.output


def test_comparison_numbers(base):
    # the first op's time set here, not measured: under load every op's replay of this
    # MLP at batch 1 can come out at its empty op's cost, time 0 (profile._cpu_timed),
    # whose ratio is none (seen beside a CPU hog, 2026-12-04)
    base = copy.deepcopy(base)
    k = 0
    base["budget"]["per_op"][k]["time_s"] = 10 * US
    name = base["budget"]["per_op"][k]["name"]
    new = slower(base, 1.2)
    new["budget"]["per_op"] = copy.deepcopy(base["budget"]["per_op"])
    new["budget"]["per_op"][k]["time_s"] = 15 * US
    new["budget"]["per_op"].append(dict(base["budget"]["per_op"][k], name="aten::new_op",
                                        time_s=1.0))
    new["fractions"] = {"overhead": 0.1, "memory": 0.2, "compute": 0.7}
    new["regime"] = "compute"
    c = compare(base, new, fail_above=0.05)
    # 120 us / 100 us - 1 = 0.2; the samples spread by +-0.5%, so the interval is tight;
    # one run a side: significant, not a failure
    assert c.change == pytest.approx(0.2) and c.significant and not c.regressed
    assert 0.19 < c.change_low < 0.2 < c.change_high < 0.21
    assert (c.old_n, c.new_n) == (21, 21) and not c.within_noise
    assert c.noise == pytest.approx(2 * base["timing"]["rel_iqr"])
    ops = {o.name: o for o in c.ops}
    assert ops[name].ratio == pytest.approx(1.5)
    assert c.ops[0].name == "aten::new_op" and c.ops[0].old_s is None  # biggest first
    assert (c.old_regime, c.new_regime) == (base["regime"], "compute")
    d = c.to_dict()
    assert d["schema"] == "gobrrr.compare" and d["schema_version"] == "1.2"
    assert d["regressed"] is False and d["significant"] is True and d["basis"] == "samples"
    assert d["change"] == pytest.approx(0.2) and d["time_limit"] == 1.0
    assert (d["change_low"], d["change_high"]) == (c.change_low, c.change_high)
    assert d["confidence"] == 0.95 and "bootstrap" in d["method"]
    assert [w["name"] for w in d["work"]] == ["FLOPs", "bytes", "op calls"]
    assert all(w["change"] == 0 for w in d["work"])


def test_output_and_json(tmp_path, base):
    r = run_compare(tmp_path, base, slower(base, 2.5), "--json", "-q")
    assert r.exit_code == 1 and r.stderr == ""
    d = json.loads(r.stdout)
    assert d["regressed"] is True and d["new_wall_s"] == pytest.approx(250e-6)
    r = run_compare(tmp_path, base, slower(base, 1.2))
    assert r.exit_code == 0
    out = " ".join(r.stdout.split())  # the words, however the console wraps them
    assert "T_wall 100 us -> 120 us: 20.0% slower (95% interval +19." in out
    assert "gate --fail-above 5%: pass: significantly slower, by at least 19." in out
    assert "(one run a side, time limit +100%; samples: 21, 21)" in out
    assert "regime split" in out and "top ops" in out
    assert "bytes: " in out and "(+0.0%)" in out
    r = run_compare(tmp_path, base, slower(base, 1.0))
    assert r.exit_code == 0
    assert "gate --fail-above 5%: pass: not a significant change in time" in r.stdout


def test_help_names_force_and_the_statistic():
    r = CliRunner().invoke(cli, ["compare", "--help"])
    assert r.exit_code == 0
    assert "--force" in r.stdout and "Welch" in r.stdout and "--repeat" in r.stdout


# --- few samples: the medians alone, said so ----------------------------------------------

@pytest.mark.parametrize("n_new", [0, 1, 2])
def test_few_samples_fall_back_to_medians(tmp_path, base, n_new):
    def new_at(seconds):
        d = with_samples(base, [seconds] * n_new) if n_new else with_samples(base, [])
        if not n_new:
            d["timing"]["median_s"] = seconds
        return d

    c = compare(base, new_at(110 * US))
    assert c.change_low is None and c.change_high is None and c.significant is None
    assert c.change == pytest.approx(0.1) and not c.regressed  # 10%: under +100%
    assert c.basis == "medians"
    assert any(f"NEW has {n_new} sample" in n and "medians alone" in n for n in c.notes)
    assert compare(base, new_at(250 * US)).regressed  # +150% on the medians
    r = run_compare(tmp_path, base, new_at(250 * US), "--json")
    assert r.exit_code == 1, r.output
    d = json.loads(r.stdout)
    assert d["change_low"] is None and d["significant"] is None and "medians" in d["method"]
    assert "medians only" in r.stderr
    r = run_compare(tmp_path, base, new_at(110 * US))
    assert r.exit_code == 0 and "no interval" in r.stdout
    assert "gate --fail-above 5%: pass: time on the medians alone" in r.stdout


# --- what may be compared ------------------------------------------------------------------

@pytest.mark.parametrize("key, value, what", [("name", "examples:other", "workloads"),
                                              ("device", "cuda", "devices")])
def test_different_workloads_or_devices_are_refused(tmp_path, base, key, value, what):
    new = copy.deepcopy(base)
    new["workload"][key] = value
    with pytest.raises(UserError, match=f"different {what}"):
        compare(base, new)
    r = run_compare(tmp_path, base, new)
    assert r.exit_code == 2, r.output
    lines = [x for x in r.output.splitlines() if x.strip()]
    assert len(lines) == 1 and f"different {what}" in lines[0] and "--force" in lines[0]
    r = run_compare(tmp_path, base, new, "--force")
    assert r.exit_code == 0, r.output
    assert f"different {what}" in r.stdout
    assert any(f"different {what}" in n for n in compare(base, new, force=True).notes)


def test_different_software_stacks_are_allowed_with_a_note(base):
    new = copy.deepcopy(base)
    new["machine"]["fingerprint"]["torch"] = "9.9.9"
    c = compare(base, new)
    assert any("different software stack" in n and "9.9.9" in n for n in c.notes)
    assert not any("hardware" in n for n in c.notes)
    new["machine"]["fingerprint"]["name"] = "Some Other CPU"
    assert any("different hardware" in n and "Some Other CPU" in n
               for n in compare(base, new).notes)


def test_different_batch_sizes_are_noted(base):
    new = copy.deepcopy(base)
    new["workload"]["batch_size"] = 7
    assert any("different batch sizes" in n for n in compare(base, new).notes)


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


@pytest.mark.parametrize("edit, says", [
    # issue 28: the median edited +30% with the samples unchanged read "30.0% slower
    # (95% interval -9.4% to +11.5%)"; NaN samples passed on the medians alone; a median
    # of 0 read "100.0% faster"
    (lambda t: t.update(median_s=t["median_s"] * 1.3), "is not the median of its samples"),
    (lambda t: t["samples_s"].__setitem__(0, float("nan")), "not a positive time"),
    (lambda t: t.update(median_s=0.0), "timing.median_s is 0.0, not a positive time"),
    (lambda t: t.update(runs_s=[t["median_s"] * 2, t["median_s"]]),
     "timing.runs_s starts with"),
    (lambda t: t.update(runs_s=[t["median_s"], -1.0]), "at timing/runs_s/1"),  # the schema
])
def test_a_doctored_report_is_refused(tmp_path, base, edit, says):
    new = copy.deepcopy(base)
    edit(new["timing"])
    r = run_compare(tmp_path, base, new)
    assert r.exit_code == 2, r.output
    errors = [x for x in r.stderr.splitlines() if x.startswith("gobrrr: error")]
    assert len(errors) == 1 and says in errors[0], r.stderr
