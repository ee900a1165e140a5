"""A probe that keeps trying bad input (issue 28): malformed events generated at random
from real traces, hostile names, doctored reports and broken caches. Each case must end in
one of the outcomes a user can act on: a one-line UserError, or a result that holds
together (a report that validates against its schema, its shares in [0, 1] summing to 1;
a calibration that re-measured). Anything else (another exception, a report its own
schema refuses) is a defect, printed with the seed that reproduces it.

Usage: python benchmarks/probe.py [--cases 200] [--seed 0]
tests/test_probe.py runs a few dozen seeded cases of it in CI.
"""

from __future__ import annotations

import argparse
import copy
import gzip
import json
import math
import random
import sys
import tempfile
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
TRACES = sorted((ROOT / "tests" / "data" / "traces").glob("*.json.gz"))

# Values no profiler writes, of every JSON type and a few that are hostile as text.
HOSTILE: list[Any] = [
    None, True, -1, 0, -1e300, 1e300, 2**63, -(2**63), 3.5, "", "oops", "\x1b[2J",
    "a" * 10_000, [], [1], [[1, 2], [3]], {}, {"x": 1}, "NaN", "-inf", "☃" * 50,
]
FIELDS = ["ph", "cat", "name", "ts", "dur", "pid", "tid", "args"]
ARG_FIELDS = ["External id", "correlation", "Input Dims", "Input type", "Input Strides",
              "Concrete Inputs", "stream", "device", "Collective name", "In msg nelems"]


def mutate_trace(doc: dict[str, Any], rng: random.Random, n: int) -> str:
    """`n` random edits of `doc`'s events in place; what was done, in words."""
    events = doc["traceEvents"]
    done = []
    for _ in range(n):
        e = rng.choice(events)
        if not isinstance(e, dict):
            continue
        if rng.random() < 0.5 and isinstance(e.get("args"), dict):
            key = rng.choice(ARG_FIELDS)
            e["args"][key] = rng.choice(HOSTILE)
            done.append(f"args[{key!r}]")
        else:
            key = rng.choice(FIELDS)
            e[key] = rng.choice(HOSTILE)
            done.append(key)
    if rng.random() < 0.1:
        events.append(rng.choice(HOSTILE))  # an event that is no object
        done.append("a non-object event")
    return ", ".join(done)


def check_report(d: dict[str, Any]) -> str | None:
    """Why a report does not hold together, or None."""
    from gobrrr.schema import validate

    try:
        validate(d, "report")
    except Exception as exc:  # noqa: BLE001 - any failure of our own schema is a defect
        return f"the report fails its own schema: {exc}"
    fr = d["fractions"]
    if not all(0 <= v <= 1 + 1e-9 for v in fr.values()) or \
            not math.isclose(sum(fr.values()), 1.0, rel_tol=1e-6):
        return f"shares out of bounds: {fr}"
    return None


def one_trace_case(rng: random.Random, tmp: Path) -> str | None:
    """A real trace with a few random edits through `gobrrr analyze`; None when the
    outcome is one a user can act on, else the defect."""
    from gobrrr.analyze import analyze
    from gobrrr.errors import UserError

    src = rng.choice(TRACES)
    doc = json.loads(gzip.open(src, "rt").read())
    what = mutate_trace(doc, rng, rng.randint(1, 6))
    path = tmp / "probe.json"
    path.write_text(json.dumps(doc))
    try:
        report = analyze([path])
    except UserError as exc:
        return None if "\n" not in str(exc) else f"{src.name} ({what}): a multi-line error"
    except Exception:  # noqa: BLE001 - the defect the probe looks for
        return f"{src.name} ({what}): {traceback.format_exc(limit=3)}"
    bad = check_report(report.to_dict())
    return None if bad is None else f"{src.name} ({what}): {bad}"


def doctored_report_case(rng: random.Random, base: dict[str, Any], tmp: Path) -> str | None:
    """`gobrrr compare` of a report against a doctored copy of it: a UserError, or a
    comparison whose interval holds its own estimate."""
    from gobrrr.compare import compare, load_report
    from gobrrr.errors import UserError

    new = copy.deepcopy(base)
    t = new["timing"]
    edit = rng.choice(["median", "sample", "samples", "zero"])
    if edit == "median":
        t["median_s"] *= rng.choice([0.5, 1.3, 10.0])
    elif edit == "sample":
        t["samples_s"][rng.randrange(len(t["samples_s"]))] = rng.choice(
            [float("nan"), -1.0, 0.0, 1e300])
    elif edit == "samples":
        t["samples_s"] = [s * rng.uniform(0.5, 2.0) for s in t["samples_s"]]
    else:
        t["median_s"] = 0.0
    path = tmp / "doctored.json"
    path.write_text(json.dumps(new))
    try:
        c = compare(base, load_report(path))
    except UserError:
        return None
    except Exception:  # noqa: BLE001
        return f"compare ({edit}): {traceback.format_exc(limit=3)}"
    if c.has_interval and not c.change_low <= c.change <= c.change_high:
        return f"compare ({edit}): the estimate {c.change:+.1%} lies outside its interval"
    return None


def broken_cache_case(rng: random.Random, tmp: Path) -> str | None:
    """A cached calibration with one field broken: calibrate must re-measure (with a
    note) or read a cache that still holds together, never crash."""
    from gobrrr import hardware

    path = next((tmp / "cache" / "gobrrr").glob("ceilings-cpu-*.json"))
    good = json.loads(path.read_text())
    broken = copy.deepcopy(good)
    key = rng.choice(["peak_flops_per_s", "bandwidth_bytes_per_s", "op_overhead_s",
                      "python_ops_per_s", "fingerprint", "device", "bandwidth_by_kernel"])
    broken[key] = rng.choice(HOSTILE)
    path.write_text(json.dumps(broken))
    try:
        ceil = hardware.calibrate("cpu")
    except Exception:  # noqa: BLE001
        return f"cache ({key}={broken[key]!r:.40}): {traceback.format_exc(limit=3)}"
    finally:
        path.write_text(json.dumps(good))
    if not (ceil.bandwidth_bytes_per_s > 0 and ceil.op_overhead_s > 0):
        return f"cache ({key}): used figures that do not hold ({ceil.to_dict()})"
    return None


def run(cases: int, seed: int, say: Callable[[str], None] = print) -> list[str]:
    """`cases` cases of each kind from `seed`; the defects found."""
    import os

    from gobrrr import hardware

    rng = random.Random(seed)
    defects: list[str] = []
    cache_before = os.environ.get("XDG_CACHE_HOME")
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        os.environ["XDG_CACHE_HOME"] = str(tmp / "cache")
        real_measure = hardware._measure
        # broken caches re-measure: a fake, fixed measurement keeps each case quick
        fake = hardware.calibrate("cpu")
        hardware._measure = lambda device, progress: copy.deepcopy(fake)  # type: ignore
        try:
            base_doc = json.loads(gzip.open(TRACES[0], "rt").read())
            path = tmp / "base.json"
            path.write_text(json.dumps(base_doc))
            from gobrrr.analyze import analyze

            base = analyze([path]).to_dict()
            for i in range(cases):
                for kind, case in (("trace", lambda: one_trace_case(rng, tmp)),
                                   ("report", lambda: doctored_report_case(rng, base, tmp)),
                                   ("cache", lambda: broken_cache_case(rng, tmp))):
                    found = case()
                    if found is not None:
                        defects.append(f"[{kind} case {i}, seed {seed}] {found}")
                        say(defects[-1])
        finally:
            hardware._measure = real_measure  # type: ignore
            if cache_before is None:
                os.environ.pop("XDG_CACHE_HOME", None)
            else:
                os.environ["XDG_CACHE_HOME"] = cache_before
    return defects


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--cases", type=int, default=200)
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    defects = run(a.cases, a.seed)
    print(f"{3 * a.cases} cases, {len(defects)} defect(s)")
    sys.exit(1 if defects else 0)


if __name__ == "__main__":
    main()
