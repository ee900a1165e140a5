"""Terminal rendering with rich. Presentation only: takes results, measures nothing."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from rich.console import Console

    from gobrrr.hardware import Ceilings

__all__ = ["console", "print_ceilings", "fmt_flops", "fmt_bytes_per_s", "fmt_s"]


def console() -> Console:
    """stdout console; honours NO_COLOR / FORCE_COLOR / TERMINAL_WIDTH (rich reads them),
    and never wider than 100 columns, so it stays readable in an 80-column terminal too."""
    from rich.console import Console

    width = None if os.environ.get("TERMINAL_WIDTH") else 100
    c = Console(highlight=False)
    if width is not None and c.width > width:
        c.width = width
    return c


def fmt_flops(x: float) -> str:
    for unit, scale in (("PFLOP/s", 1e15), ("TFLOP/s", 1e12), ("GFLOP/s", 1e9)):
        if x >= scale:
            return f"{x / scale:.3g} {unit}"
    return f"{x / 1e6:.3g} MFLOP/s"


def fmt_bytes_per_s(x: float) -> str:
    for unit, scale in (("TB/s", 1e12), ("GB/s", 1e9)):
        if x >= scale:
            return f"{x / scale:.3g} {unit}"
    return f"{x / 1e6:.3g} MB/s"


def fmt_s(x: float) -> str:
    if x >= 1:
        return f"{x:.3g} s"
    if x >= 1e-3:
        return f"{x * 1e3:.3g} ms"
    return f"{x * 1e6:.3g} us"


def print_ceilings(ceil: Ceilings) -> None:
    from rich.table import Table

    entry = ceil.datasheet_entry()
    fp = ceil.fingerprint
    title = f"{fp.get('name', ceil.device)} ({ceil.device}), torch {fp.get('torch')}"
    table = Table(title=title, title_justify="left")
    table.add_column("ceiling")
    table.add_column("measured", justify="right")
    table.add_column("datasheet", justify="right")
    table.add_column("% of sheet", justify="right")
    for dtype, value in ceil.peak_flops_per_s.items():
        sheet = entry.peak_flops_per_s.get(dtype) if entry else None
        table.add_row(
            f"matmul {dtype}",
            fmt_flops(value),
            fmt_flops(sheet) if sheet else "-",
            f"{100 * value / sheet:.0f}%" if sheet else "-",
        )
    sheet_bw = entry.bandwidth_bytes_per_s if entry else None
    table.add_row(
        "copy bandwidth (r+w)",
        fmt_bytes_per_s(ceil.bandwidth_bytes_per_s),
        fmt_bytes_per_s(sheet_bw) if sheet_bw else "-",
        f"{100 * ceil.bandwidth_bytes_per_s / sheet_bw:.0f}%" if sheet_bw else "-",
    )
    table.add_row("eager per-op cost", fmt_s(ceil.op_overhead_s), "-", "-")
    table.add_row("Python float adds", f"{ceil.python_ops_per_s / 1e6:.3g} M/s", "-", "-")
    out = console()
    out.print(table)
    ridge = ", ".join(
        f"{d} {ceil.ridge_flops_per_byte(d):.0f}" for d in ceil.peak_flops_per_s
    )
    out.print(f"ridge points (FLOP/byte): {ridge}")
    src = f"datasheet: {entry.source}" if entry else "no datasheet entry for this device"
    out.print(f"[dim]{ceil.source} {ceil.measured_at} in {ceil.calibrate_s:.1f} s; {src}[/dim]")
