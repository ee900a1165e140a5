"""Two doctor reports (--json files), or two sides of several, side by side: what changed
in the work, in wall time, in the regime split and in the top ops; and whether NEW is
worse than a threshold allows, so `gobrrr compare` can gate CI.

The gate reads what does not vary first (issue 25, item 5): the counted step's FLOPs,
bytes and op calls are the same in every run of the same code, so NEW doing more of any
of them than --fail-above allows fails the gate, whatever the timing noise (a new
unfused op is a regression no noise hides). Time gates only where the noise between
runs is known: on a shared CPU identical back-to-back doctor runs moved their medians by
more than 5% in 23 of 56 pairs, far beyond the spread of either run's own samples.
- Both sides with MIN_RUNS or more independent runs (`doctor --repeat N`, whose report
  keeps the T_wall of the same command in N processes in `timing.runs_s`, or several
  reports a side; processes, since a process's state shifts all its runs): a Welch
  interval of the ratio of the runs' geometric means, from the run medians' logs (runs
  are few, so a t interval, not a bootstrap of three values); NEW fails when the
  interval's lower end is above --fail-above.
- Fewer runs on either side: the interval from the runs' own samples below (a bootstrap)
  is shown, but a slowdown fails only when that interval's lower end is above
  FAR_ABOVE (2x): one run a side cannot tell a code change from a shift between runs,
  so it is a note, never a failure, unless the slowdown is beyond any shift seen.

The within-run statistic, kept for one run a side, reads T_wall (the honest timer's
median per call) and both runs' recorded samples (`timing.samples_s`): a bootstrap of
the ratio of medians (NEW / OLD). Each of RESAMPLES rounds resamples each run's samples
with replacement (independently: the runs are separate) and takes the ratio of the two
resampled medians; the 2.5th and 97.5th percentiles of those ratios are a 95% two-sided
interval for the change. Why the median and a
bootstrap: T_wall is a median, timing noise is skewed (stalls make a long right tail),
and the bootstrap needs no assumption about the distribution (and no scipy). Why 95%
two-sided: its lower end is a 97.5% one-sided lower bound, which is what a one-sided
gate needs; with no real change the lower end clears 0 in nominally 2.5% of pairs and a
threshold of 5% far more rarely (0 to 1 in 100 pairs of 5 to 100 samples with a 20%
spread, tests/test_compare.py); the upper end shows how large the change could be. The
generator has a fixed seed, so one pair of reports always gets the same answer.

- `significant`: the interval excludes "no change" (a bootstrap test at the 5% level,
  two-sided).
- a significant slowdown whose interval's lower end is above the limit: NEW is slower
  than it allows with 97.5% confidence.
- The price: a slowdown the runs' noise cannot resolve passes. To catch a 20% slowdown
  at a 5% threshold when samples spread by 20%, both runs need about 100 samples (the
  timer's maximum, which it reaches on noisy workloads when the time budget allows), and
  even then it is caught in about 95% of pairs; quiet runs (2% spread) need only 5.
- With fewer than MIN_SAMPLES samples in either run there is no interval: the medians
  are compared against FAR_ABOVE, and a note says so.
"""

from __future__ import annotations

import json
import math
import statistics
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from gobrrr.errors import UserError
from gobrrr.schema import kind_of, validate
from gobrrr.units import fmt_change

__all__ = ["timing_problem", "OpChange", "WorkChange", "Comparison", "load_report",
           "load_side", "compare", "parse_percent", "ratio_interval", "runs_interval",
           "t_quantile",
           "run_medians", "REGIMES", "CONFIDENCE", "RESAMPLES", "SEED", "MIN_SAMPLES",
           "MIN_RUNS", "FAR_ABOVE", "SCHEMA_VERSION"]

REGIMES = ("overhead", "memory", "compute")
# 1.1: change_low/high, significant, method, sample counts; 1.2: basis, old_runs_s,
# new_runs_s, work, work_regressed, time_regressed, old_reports, new_reports
SCHEMA_VERSION = "1.2"
CONFIDENCE = 0.95  # two-sided; its lower end is a 97.5% one-sided lower bound
RESAMPLES = 4000  # another seed moves the interval's ends by ~4% of the ratio's std error
SEED = 0  # fixed: one pair of reports always gets one answer
MIN_SAMPLES = 3  # fewer in either run: no interval, medians only
MIN_RUNS = 3  # independent runs a side needs before time can fail the gate at --fail-above
FAR_ABOVE = 1.0  # fewer runs: time fails only beyond +100% (a shift no rerun explains)
WORK = (("total_flops", "FLOPs"), ("total_bytes", "bytes"), ("ops", "op calls"))
_CELLS = 2_000_000  # resampled values held at once (16 MB of float64)


def _sample_problem(samples: Sequence[float]) -> str | None:
    """Why these samples cannot give an interval, or None."""
    if len(samples) < MIN_SAMPLES:
        return f"{len(samples)} sample{'s' * (len(samples) != 1)}"
    if not all(math.isfinite(s) and s > 0 for s in samples):
        return "samples of 0 s or not finite"
    return None


def _resampled_medians(samples: Sequence[float], rng: np.random.Generator,
                       resamples: int) -> np.ndarray:
    """The medians of `resamples` resamples (with replacement) of `samples`."""
    x = np.asarray(samples, dtype=np.float64)
    n = len(x)
    out = np.empty(resamples)
    rows = max(1, _CELLS // n)  # bounded memory for any number of samples
    for start in range(0, resamples, rows):
        k = min(rows, resamples - start)
        out[start:start + k] = np.median(x[rng.integers(0, n, size=(k, n))], axis=1)
    return out


def ratio_interval(old_s: Sequence[float], new_s: Sequence[float], *,
                   confidence: float = CONFIDENCE, resamples: int = RESAMPLES,
                   seed: int = SEED) -> tuple[float, float] | None:
    """Percentile-bootstrap interval (two-sided, `confidence`) of median(NEW) / median(OLD)
    from each run's samples; None when either run has fewer than MIN_SAMPLES samples or
    a sample that is not a positive number."""
    if _sample_problem(old_s) or _sample_problem(new_s):
        return None
    rng = np.random.default_rng(seed)
    ratios = _resampled_medians(new_s, rng, resamples) / _resampled_medians(old_s, rng,
                                                                            resamples)
    tail = (1 - confidence) / 2
    low, high = np.quantile(ratios, [tail, 1 - tail])
    return float(low), float(high)


def _t_cdf(t: float, df: float) -> float:
    """Student's t CDF at t >= 0 (Simpson's rule over the density from 0: numpy has no t
    distribution and scipy is not a dependency)."""
    c = math.exp(math.lgamma((df + 1) / 2) - math.lgamma(df / 2)) / math.sqrt(df * math.pi)
    n = 400  # even; the density is smooth: quantiles within 1e-6 of the tables' (tests)
    h = t / n
    total = sum((1 if i in (0, n) else 4 if i % 2 else 2)
                * (1 + (i * h) ** 2 / df) ** (-(df + 1) / 2) for i in range(n + 1))
    return 0.5 + c * total * h / 3


def t_quantile(p: float, df: float) -> float:
    """The p-quantile (p > 0.5) of Student's t with df degrees of freedom, by bisection."""
    lo, hi = 0.0, 1.0
    while _t_cdf(hi, df) < p:
        hi *= 2
    for _ in range(40):  # the bracket halves each time: 2^-40 of it
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if _t_cdf(mid, df) < p else (lo, mid)
    return (lo + hi) / 2


def runs_interval(old_runs_s: Sequence[float], new_runs_s: Sequence[float], *,
                  confidence: float = CONFIDENCE) -> tuple[float, float] | None:
    """Welch interval (two-sided, `confidence`) of the ratio of NEW's and OLD's geometric
    mean run times, from the logs of the run medians; None with fewer than MIN_RUNS runs
    a side. Runs of one side that agree exactly give a zero-width side."""
    if min(len(old_runs_s), len(new_runs_s)) < MIN_RUNS:
        return None
    a = [math.log(x) for x in old_runs_s]
    b = [math.log(x) for x in new_runs_s]
    va, vb = statistics.variance(a) / len(a), statistics.variance(b) / len(b)
    d = statistics.fmean(b) - statistics.fmean(a)
    se = math.sqrt(va + vb)
    if se == 0:
        return math.exp(d), math.exp(d)
    df = (va + vb) ** 2 / (va ** 2 / (len(a) - 1) + vb ** 2 / (len(b) - 1))
    half = t_quantile(1 - (1 - confidence) / 2, df) * se
    return math.exp(d - half), math.exp(d + half)


@dataclass
class WorkChange:
    """One counted quantity of the step, which does not vary between runs of one code."""

    name: str  # "FLOPs", "bytes", "op calls"
    old: int | None  # None: the side's reports disagree (not gated)
    new: int | None

    @property
    def change(self) -> float | None:
        if self.old is None or self.new is None or self.old <= 0:
            return None
        return self.new / self.old - 1


@dataclass
class OpChange:
    name: str
    old_s: float | None  # None: the op is not in that report
    new_s: float | None
    old_bound: str | None
    new_bound: str | None

    @property
    def ratio(self) -> float | None:
        return self.new_s / self.old_s if self.old_s and self.new_s is not None else None


@dataclass
class Comparison:
    old_name: str
    new_name: str
    old_wall_s: float
    new_wall_s: float
    old_fractions: dict[str, float]
    new_fractions: dict[str, float]
    old_regime: str
    new_regime: str
    noise: float  # relative: old rel_iqr + new rel_iqr (shown in 1.0; kept for its readers)
    fail_above: float  # relative slow-down that fails the gate
    ops: list[OpChange] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    old_n: int = 0  # samples in each run's timing.samples_s
    new_n: int = 0
    # The CONFIDENCE interval of `change`; None: too few samples, the gate reads medians.
    change_low: float | None = None
    change_high: float | None = None
    confidence: float = CONFIDENCE
    # What time is judged on: "runs" (MIN_RUNS or more independent runs a side: the
    # between-run interval, gated at fail_above), "samples" (one run's samples: the
    # within-run interval, gated at FAR_ABOVE) or "medians" (too few samples: FAR_ABOVE).
    basis: str = "samples"
    old_runs_s: list[float] = field(default_factory=list)
    new_runs_s: list[float] = field(default_factory=list)
    work: list[WorkChange] = field(default_factory=list)
    old_reports: int = 1
    new_reports: int = 1

    @property
    def change(self) -> float:
        """Relative change of T_wall: +0.07 is 7% slower."""
        return self.new_wall_s / self.old_wall_s - 1

    @property
    def has_interval(self) -> bool:
        return self.change_low is not None and self.change_high is not None

    @property
    def interval_text(self) -> str | None:
        """'95% interval +3.1% to +9.8%', or None without an interval."""
        if self.change_low is None or self.change_high is None:
            return None

        return (f"{100 * self.confidence:g}% interval {fmt_change(self.change_low)} to "
                f"{fmt_change(self.change_high)}")

    @property
    def significant(self) -> bool | None:
        """The interval excludes no change; None without an interval."""
        if self.change_low is None or self.change_high is None:
            return None
        return self.change_low > 0 or self.change_high < 0

    @property
    def time_limit(self) -> float:
        """The slowdown time must exceed to fail: fail_above on runs, else FAR_ABOVE."""
        return self.fail_above if self.basis == "runs" else max(FAR_ABOVE, self.fail_above)

    @property
    def time_regressed(self) -> bool:
        """Time fails: the interval's lower end above `time_limit` (a significant
        slowdown); without an interval, the median change above it."""
        if self.change_low is None:
            return self.change > self.time_limit
        return bool(self.significant) and self.change_low > 0 \
            and self.change_low > self.time_limit

    @property
    def work_regressed(self) -> list[WorkChange]:
        """The counted quantities NEW grew by more than fail_above."""
        return [w for w in self.work if (ch := w.change) is not None and ch > self.fail_above]

    @property
    def regressed(self) -> bool:
        """Fails the gate: more work than fail_above allows, or a time regression."""
        return bool(self.work_regressed) or self.time_regressed

    @property
    def within_noise(self) -> bool:
        """Not a significant change; without an interval, the change is within the two
        runs' IQRs added (the 1.0 reading)."""
        if self.significant is None:
            return abs(self.change) <= self.noise
        return not self.significant

    @property
    def method(self) -> str:
        if self.basis == "runs":
            return (f"Welch interval of the ratio of geometric mean run times, "
                    f"{100 * self.confidence:g}%, over {len(self.old_runs_s)} and "
                    f"{len(self.new_runs_s)} independent runs")
        if self.has_interval:
            return (f"bootstrap ratio of medians, {100 * self.confidence:g}% percentile "
                    f"interval, {RESAMPLES} resamples, seed {SEED}")
        return "medians only (too few samples for an interval)"

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["ops"] = [dict(asdict(o), ratio=o.ratio) for o in self.ops]
        d["work"] = [dict(asdict(w), change=w.change) for w in self.work]
        d.update(change=self.change, significant=self.significant,
                 regressed=self.regressed, within_noise=self.within_noise,
                 time_regressed=self.time_regressed, time_limit=self.time_limit,
                 work_regressed=[w.name for w in self.work_regressed],
                 method=self.method, schema="gobrrr.compare",
                 schema_version=SCHEMA_VERSION)
        return d


def parse_percent(text: str) -> float:
    """'5%' or '5' -> 0.05. A threshold is a percentage: '0.05' means 0.05%."""
    t = text.strip().rstrip("%").strip()
    try:
        value = float(t)
    except ValueError:
        raise UserError(f"--fail-above {text!r}: expected a percentage like 5%") from None
    if not math.isfinite(value):
        raise UserError(f"--fail-above {text!r}: expected a percentage like 5%")
    if value < 0:
        raise UserError(f"--fail-above {text!r}: must not be negative")
    return value / 100


def load_report(path: str | Path) -> dict[str, Any]:
    """A `gobrrr doctor --json` file, checked against the report schema."""

    p = Path(path)
    try:
        data = json.loads(p.read_text(encoding="utf-8"))
    except OSError as exc:
        raise UserError(f"cannot read {p}: {exc.strerror or exc}") from None
    except ValueError as exc:
        raise UserError(f"{p} is not JSON ({exc})") from None
    kind = kind_of(data)
    if kind != "report":  # another file: say what it is, not the schema's first nit
        what = f"gobrrr {kind} JSON" if kind else 'JSON without "schema": "gobrrr.report"'
        raise UserError(f"{p} is {what}, not a gobrrr report (gobrrr doctor --json "
                        "writes one)")
    try:
        validate(data, "report")
    except UserError as exc:
        raise UserError(f"{p}: {exc}") from None
    problem = timing_problem(data["timing"])
    if problem is not None:
        raise UserError(f"{p}: {problem}: not the timing gobrrr wrote; measure again")
    return data


def timing_problem(t: dict[str, Any]) -> str | None:
    """Why a report's timing cannot be believed, or None: every sample a positive finite
    number, and the median the samples' median (a doctored report, its median edited
    +30% with the samples unchanged, was read "30.0% slower" outside its own interval;
    NaN samples passed "on the medians alone"; a median of 0 read "100.0% faster")."""
    samples = t.get("samples_s") or []
    med = t.get("median_s")
    if not isinstance(med, (int, float)) or not math.isfinite(med) or med <= 0:
        return f"timing.median_s is {med}, not a positive time"
    if not all(isinstance(x, (int, float)) and math.isfinite(x) and x > 0 for x in samples):
        return "timing.samples_s holds a value that is not a positive time"
    if samples and not math.isclose(statistics.median(samples), med, rel_tol=1e-9):
        return (f"timing.median_s {med:.6g} s is not the median of its samples "
                f"({statistics.median(samples):.6g} s)")
    runs = t.get("runs_s") or []
    if not all(isinstance(x, (int, float)) and math.isfinite(x) and x > 0 for x in runs):
        return "timing.runs_s holds a value that is not a positive time"
    if runs and not math.isclose(runs[0], med, rel_tol=1e-9):
        return (f"timing.runs_s starts with {runs[0]:.6g} s, not the report's own median "
                f"({med:.6g} s)")
    return None


def _rows(d: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {r["name"]: r for r in d["budget"]["per_op"]}


# Fingerprint keys that name the hardware; the others (torch, python, CUDA runtime and
# driver, CPU threads) are the software stack.
_HARDWARE_KEYS = ("device", "name", "capability", "machine")


def _check_same_workload(old: dict[str, Any], new: dict[str, Any], force: bool,
                         notes: list[str]) -> None:
    """Different workloads or devices: refused (the gate would compare apples with
    pears) unless forced, then noted."""
    for key, what in (("name", "workloads"), ("device", "devices")):
        a, b = old["workload"].get(key), new["workload"].get(key)
        if a != b:
            if not force:
                raise UserError(f"OLD and NEW measure different {what} ({a} vs {b}): "
                                "their times are not comparable; --force compares anyway")
            notes.append(f"different {what}: {a} vs {b} (compared with --force)")


def run_medians(reports: Sequence[dict[str, Any]]) -> list[float]:
    """Every independent run's median on one side: each report's `timing.runs_s` (doctor
    --repeat), else its median."""
    return [float(x) for d in reports
            for x in (d["timing"].get("runs_s") or [d["timing"]["median_s"]])]


def _side_work(reports: Sequence[dict[str, Any]], key: str) -> int | None:
    """A side's count of `key`, or None when its reports disagree."""
    values = {int(d["counts"][key]) for d in reports}
    return values.pop() if len(values) == 1 else None


def load_side(paths: str | Path) -> list[dict[str, Any]]:
    """One side of a comparison: a report path, or several separated by commas."""
    parts = [p.strip() for p in str(paths).split(",") if p.strip()]
    if not parts:
        raise UserError(f"{paths!r}: no report path")
    return [load_report(p) for p in parts]


def compare(old: dict[str, Any] | Sequence[dict[str, Any]],
            new: dict[str, Any] | Sequence[dict[str, Any]], *, fail_above: float = 0.05,
            top: int = 8, force: bool = False) -> Comparison:
    """Compare two sides, each a report dict (Report.to_dict()) or several reports of
    one workload (module docstring). Raises UserError for reports of different workloads
    or devices unless `force`."""
    olds = [old] if isinstance(old, dict) else list(old)
    news = [new] if isinstance(new, dict) else list(new)
    notes: list[str] = []
    for other in olds[1:] + news:
        _check_same_workload(olds[0], other, force, notes)
    old, new = olds[0], news[0]  # the first report of each side: its split and ops
    ot, nt = old["timing"], new["timing"]
    old_runs, new_runs = run_medians(olds), run_medians(news)
    old_samples = [x for d in olds for x in d["timing"]["samples_s"]]
    new_samples = [x for d in news for x in d["timing"]["samples_s"]]
    c = Comparison(
        old_name=old["workload"]["name"], new_name=new["workload"]["name"],
        old_wall_s=statistics.median(old_samples or old_runs),
        new_wall_s=statistics.median(new_samples or new_runs),
        old_fractions=old["fractions"], new_fractions=new["fractions"],
        old_regime=old["regime"], new_regime=new["regime"],
        noise=ot["rel_iqr"] + nt["rel_iqr"], fail_above=fail_above, notes=notes,
        old_n=len(old_samples), new_n=len(new_samples), old_runs_s=old_runs,
        new_runs_s=new_runs, old_reports=len(olds), new_reports=len(news))
    if c.old_wall_s <= 0:
        raise UserError("OLD report has a wall time of 0: nothing to compare against")
    for key, name in WORK:
        c.work.append(WorkChange(name, _side_work(olds, key), _side_work(news, key)))
        if None in (c.work[-1].old, c.work[-1].new):
            c.notes.append(f"the {name} of one side's reports differ: not gated")
    between = runs_interval(old_runs, new_runs)
    if between is not None:
        # the point estimate the interval is about: the runs' geometric means
        c.basis = "runs"
        c.old_wall_s, c.new_wall_s = statistics.geometric_mean(old_runs), \
            statistics.geometric_mean(new_runs)
        c.change_low, c.change_high = between[0] - 1, between[1] - 1
    else:
        interval = ratio_interval(old_samples, new_samples)
        if interval is None:
            c.basis = "medians"
            why = "; ".join(f"{side} has {p}" for side, p in
                            (("OLD", _sample_problem(old_samples)),
                             ("NEW", _sample_problem(new_samples))) if p)
            c.notes.append(f"no confidence interval ({why}; need {MIN_SAMPLES} positive "
                           "samples in each run): the medians alone cannot tell a slowdown "
                           "from noise")
        else:
            c.change_low, c.change_high = interval[0] - 1, interval[1] - 1
        c.notes.append(
            f"time from {len(old_runs)} and {len(new_runs)} run(s): one run's samples "
            "cannot see the shifts between runs (identical CPU runs moved by over 5% in "
            f"23 of 56 pairs), so time fails the gate only beyond +{100 * FAR_ABOVE:.0f}%; "
            f"`gobrrr doctor --repeat {MIN_RUNS}` (or more) on each side gates it at "
            f"--fail-above")
    o_rows, n_rows = _rows(old), _rows(new)
    # The ops that matter in either run: the top `top` of each, by time.
    names = [r["name"] for r in old["budget"]["per_op"][:top]]
    names += [r["name"] for r in new["budget"]["per_op"][:top] if r["name"] not in names]

    def biggest(name: str) -> float:
        return -max(o_rows.get(name, {}).get("time_s", 0.0),
                    n_rows.get(name, {}).get("time_s", 0.0))

    for name in sorted(names, key=biggest):
        o, n = o_rows.get(name), n_rows.get(name)
        c.ops.append(OpChange(name, o["time_s"] if o else None, n["time_s"] if n else None,
                              o["bound"] if o else None, n["bound"] if n else None))
    ow, nw = old["workload"], new["workload"]
    if ow.get("batch_size") != nw.get("batch_size"):
        c.notes.append(f"different batch sizes: {ow.get('batch_size')} vs "
                       f"{nw.get('batch_size')} (time per call is not per sample)")
    fo, fn = old["machine"]["fingerprint"], new["machine"]["fingerprint"]
    diff = [k for k in sorted(set(fo) | set(fn)) if fo.get(k) != fn.get(k)]
    hw = [k for k in diff if k in _HARDWARE_KEYS]
    sw = [k for k in diff if k not in _HARDWARE_KEYS]

    def changes(keys: list[str]) -> str:
        return ", ".join(f"{k}: {fo.get(k)} -> {fn.get(k)}" for k in keys)

    if hw:
        c.notes.append(f"measured on different hardware ({changes(hw)}): the change is "
                       "the machine's as much as the code's")
    if sw:
        c.notes.append(f"different software stack ({changes(sw)}): the change includes "
                       "the upgrade's effect")
    return c
