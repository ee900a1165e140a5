"""Two doctor reports (--json files) side by side: what changed in wall time, in the
regime split, and in the top ops; and whether NEW is slower than a threshold allows, so
`gobrrr compare` can gate CI.

The gate reads T_wall (the honest timer's median per call). Differences smaller than the
two runs' spread (their relative IQRs added) are reported as within noise, but the gate
still applies the threshold the user chose: the threshold *is* the noise allowance.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from gobrrr.errors import UserError

__all__ = ["OpChange", "Comparison", "load_report", "compare", "parse_percent", "REGIMES"]

REGIMES = ("overhead", "memory", "compute")


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
    noise: float  # relative: old rel_iqr + new rel_iqr
    fail_above: float  # relative slow-down that fails the gate
    ops: list[OpChange] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def change(self) -> float:
        """Relative change of T_wall: +0.07 is 7% slower."""
        return self.new_wall_s / self.old_wall_s - 1

    @property
    def regressed(self) -> bool:
        return self.change > self.fail_above

    @property
    def within_noise(self) -> bool:
        return abs(self.change) <= self.noise

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["ops"] = [dict(asdict(o), ratio=o.ratio) for o in self.ops]
        d.update(change=self.change, regressed=self.regressed,
                 within_noise=self.within_noise, schema="gobrrr.compare",
                 schema_version="1.0")
        return d


def parse_percent(text: str) -> float:
    """'5%' or '5' -> 0.05. A threshold is a percentage: '0.05' means 0.05%."""
    t = text.strip().rstrip("%").strip()
    try:
        value = float(t)
    except ValueError:
        raise UserError(f"--fail-above {text!r}: expected a percentage like 5%") from None
    if value < 0:
        raise UserError(f"--fail-above {text!r}: must not be negative")
    return value / 100


def load_report(path: str | Path) -> dict[str, Any]:
    """A `gobrrr doctor --json` file, checked against the report schema."""
    from gobrrr.schema import validate

    p = Path(path)
    try:
        data = json.loads(p.read_text(encoding="utf-8"))
    except OSError as exc:
        raise UserError(f"cannot read {p}: {exc.strerror or exc}") from None
    except ValueError as exc:
        raise UserError(f"{p} is not JSON ({exc})") from None
    try:
        validate(data, "report")
    except UserError as exc:
        raise UserError(f"{p}: {exc}") from None
    return data


def _rows(d: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {r["name"]: r for r in d["budget"]["per_op"]}


def compare(old: dict[str, Any], new: dict[str, Any], *, fail_above: float = 0.05,
            top: int = 8) -> Comparison:
    """Compare two report dicts (Report.to_dict())."""
    c = Comparison(
        old_name=old["workload"]["name"], new_name=new["workload"]["name"],
        old_wall_s=old["timing"]["median_s"], new_wall_s=new["timing"]["median_s"],
        old_fractions=old["fractions"], new_fractions=new["fractions"],
        old_regime=old["regime"], new_regime=new["regime"],
        noise=old["timing"]["rel_iqr"] + new["timing"]["rel_iqr"], fail_above=fail_above)
    if c.old_wall_s <= 0:
        raise UserError("OLD report has a wall time of 0: nothing to compare against")
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
    if c.old_name != c.new_name:
        c.notes.append(f"different workloads: {c.old_name} vs {c.new_name}")
    ow, nw = old["workload"], new["workload"]
    if ow.get("batch_size") != nw.get("batch_size"):
        c.notes.append(f"different batch sizes: {ow.get('batch_size')} vs "
                       f"{nw.get('batch_size')} (time per call is not per sample)")
    fo, fn = old["machine"]["fingerprint"], new["machine"]["fingerprint"]
    diff = [k for k in sorted(set(fo) | set(fn)) if fo.get(k) != fn.get(k)]
    if diff:
        c.notes.append("measured on different machines or software stacks ("
                       + ", ".join(f"{k}: {fo.get(k)} -> {fn.get(k)}" for k in diff) + ")")
    return c
