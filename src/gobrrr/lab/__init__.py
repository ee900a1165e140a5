"""`gobrrr lab`: the essay's experiments, measured on this machine.

Each experiment is a module with `run(ctx) -> LabResult` and `plot(result, axes)`; this
facade runs a selection of them against one calibration and collects the results.
Importing this package does not import torch (each module imports it inside functions).
"""

from __future__ import annotations

import datetime as _dt
import importlib
import time
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from gobrrr.lab.common import ESSAY_SOURCE, LabContext, LabResult

__all__ = ["EXPERIMENTS", "LabReport", "run_lab", "experiment_module", "unknown_names"]

# Run order: the cheap, compile-free experiments first would give faster feedback, but
# the essay's order reads better in a report; the CLI keeps this order.
EXPERIMENTS: tuple[str, ...] = ("repeat", "fusion", "activations", "batch", "overhead",
                                "opclasses")


def experiment_module(name: str) -> Any:
    return importlib.import_module(f"gobrrr.lab.{name}")


def unknown_names(names: Sequence[str]) -> list[str]:
    return [n for n in names if n not in EXPERIMENTS]


@dataclass
class LabReport:
    device: str
    quick: bool
    fingerprint: dict[str, str]
    ceilings: dict[str, Any]
    started_at: str
    results: list[LabResult] = field(default_factory=list)
    errors: dict[str, str] = field(default_factory=dict)  # experiment -> what it raised
    wall_s: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return {
            "gobrrr_lab": 1,
            "device": self.device,
            "quick": self.quick,
            "fingerprint": self.fingerprint,
            "ceilings": self.ceilings,
            "started_at": self.started_at,
            "wall_s": self.wall_s,
            "essay_source": ESSAY_SOURCE,
            "conclusions": {r.name: r.conclusion for r in self.results},
            "experiments": {r.name: r.to_dict() for r in self.results},
            "errors": self.errors,
        }


def run_lab(
    names: Sequence[str] | None = None,
    *,
    device: str = "cpu",
    quick: bool = False,
    progress: Callable[[str], None] | None = None,
) -> LabReport:
    """Run the named experiments (all by default) on `device`.

    An experiment that raises is recorded in `errors` with its traceback's last line and
    the others still run: one broken experiment must not cost a whole GPU session.
    """
    from gobrrr import settings
    from gobrrr.hardware import calibrate

    names = list(names or EXPERIMENTS)
    bad = unknown_names(names)
    if bad:
        raise ValueError(f"unknown experiment(s): {', '.join(bad)}")
    say = progress or (lambda _msg: None)
    t0 = time.perf_counter()
    started = _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")
    say(f"calibrating {device} (cached after the first run)")
    ceilings = calibrate(device, progress=say)
    ctx = LabContext(device=device, quick=quick, ceilings=ceilings, progress=say)
    report = LabReport(device=device, quick=quick, fingerprint=dict(ceilings.fingerprint),
                       ceilings=ceilings.to_dict(), started_at=started)
    for name in EXPERIMENTS:  # always in the canonical order
        if name not in names:
            continue
        say(f"lab {name}")
        try:
            with settings.preserved():  # grad mode, TF32, Inductor config
                report.results.append(experiment_module(name).run(ctx))
            ctx.free()  # the experiment's tensors died with its frame
        except Exception as exc:  # noqa: BLE001 - recorded and reported, exit code 1
            last = traceback.format_exception_only(type(exc), exc)[-1].strip()
            report.errors[name] = last[:500]
            say(f"lab {name} failed: {last[:200]}")
            ctx.free()
    report.wall_s = time.perf_counter() - t0
    return report
