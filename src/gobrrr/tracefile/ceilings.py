"""Ceilings for a trace recorded elsewhere: measured ones where this machine has them for
the same device, else the vendor's datasheet, said so in a note.

- GPU trace: the device is the trace's `deviceProperties[0].name`. A calibration cached
  on this machine for a GPU of that name (hardware.cached_for) is used as it is; so is a
  live calibration when this machine has that GPU. Otherwise the datasheet's peaks
  (datasheet.py), which run above what kernels reach (this project's H200 calibration,
  benchmarks/results/h200/calibrate.json: 672 of 989 TFLOP/s bf16, 4.26 of 4.8 TB/s):
  the split is made against optimistic roofs, and achieved fractions read low.
- CPU trace: the trace does not say which CPU ran it; this machine's CPU calibration is
  used and the note says so.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from gobrrr import datasheet
from gobrrr.errors import UserError
from gobrrr.hardware import Ceilings, cached_for, calibrate

__all__ = ["ceilings_for_trace"]


def _datasheet_ceilings(name: str, props: dict[str, Any], torch_version: str | None
                        ) -> Ceilings | None:

    entry = datasheet.lookup(name)
    if entry is None:
        return None
    fp = {"device": "cuda", "name": name, "torch": torch_version or "unknown",
          "python": "unknown"}
    if "computeMajor" in props and "computeMinor" in props:
        fp["capability"] = f"{props['computeMajor']}.{props['computeMinor']}"
    return Ceilings(device="cuda", fingerprint=fp,
                    peak_flops_per_s=dict(entry.peak_flops_per_s),
                    bandwidth_bytes_per_s=entry.bandwidth_bytes_per_s,
                    op_overhead_s=0.0, python_ops_per_s=0.0, measured_at="never (datasheet)",
                    calibrate_s=0.0, details={"datasheet": entry.source},
                    source="datasheet")


def ceilings_for_trace(device: str, props: list[dict[str, Any]], torch_version: str | None,
                       progress: Callable[[str], None]) -> tuple[Ceilings, list[str]]:
    """(ceilings, notes) for a trace whose kernels ran on `device` ("cuda" or "cpu")."""

    if device == "cpu":
        ceil = calibrate("cpu", progress=progress)
        return ceil, ["ceilings: this machine's CPU (the trace does not name the CPU that "
                      "recorded it): on another CPU the compute/memory split may differ"]
    name = str(props[0].get("name", "")) if props else ""
    if not name:
        raise UserError("the trace ran kernels but names no GPU (no deviceProperties): "
                        "cannot choose ceilings for it")
    cached = cached_for("cuda", name)
    if cached is not None:
        return cached, [f"ceilings: this machine's calibration of the {name} (measured "
                        f"{cached.measured_at}, torch {cached.fingerprint.get('torch')})"]
    if _here(name):
        progress(f"calibrating this {name} (the trace's GPU)")
        return calibrate("cuda", progress=progress), [
            f"ceilings: measured on this machine's {name}, the GPU the trace ran on"]
    sheet = _datasheet_ceilings(name, props[0], torch_version)
    if sheet is None:
        raise UserError(f"no ceilings for the trace's GPU {name!r}: it has no datasheet "
                        "entry and no calibration of it is cached here (run `gobrrr "
                        "calibrate --device cuda` on a machine with that GPU)")
    return sheet, [f"ceilings: datasheet peaks of the {name} ({sheet.details['datasheet']}), "
                   "not measured: no calibration of it on this machine. Kernels reach less "
                   "than a datasheet's peaks, so achieved fractions read low; `gobrrr "
                   "calibrate --device cuda` on that GPU measures them"]


def _here(name: str) -> bool:
    """Whether this machine's current GPU (the one `calibrate` measures) has that name."""
    import torch

    return torch.cuda.is_available() and \
        torch.cuda.get_device_name(torch.cuda.current_device()) == name
