"""Numbers with units, formatted one way everywhere (terminal, HTML, figures, lab,
optimize tables, the verdict's sentences). Three significant digits: the timer's noise is
a few percent, so more digits would claim precision the measurement does not have."""

from __future__ import annotations

__all__ = ["fmt_s", "fmt_flops", "fmt_bytes_per_s", "fmt_num", "fmt_pct", "fmt_change"]


def _sig3(x: float) -> float:
    """x rounded to the three significant digits it will be shown with, so that the unit
    is chosen after rounding (999.99e9 B/s is '1 TB/s', never '1e+03 GB/s')."""
    return float(f"{x:.3g}")


def fmt_s(x: float | None) -> str:
    """Seconds: '1.5 s', '2.35 ms', '38 us'; '-' for no value."""
    if x is None:
        return "-"
    x = _sig3(x)
    if x >= 1:
        return f"{x:.3g} s"
    if x >= 1e-3:
        return f"{x * 1e3:.3g} ms"
    return f"{x * 1e6:.3g} us"


def fmt_flops(x: float) -> str:
    """A rate of floating-point operations: '681 TFLOP/s'."""
    x = _sig3(x)
    for unit, scale in (("PFLOP/s", 1e15), ("TFLOP/s", 1e12), ("GFLOP/s", 1e9)):
        if x >= scale:
            return f"{x / scale:.3g} {unit}"
    return f"{x / 1e6:.3g} MFLOP/s"


def fmt_bytes_per_s(x: float) -> str:
    """A bandwidth in decimal units, as datasheets state it: '4.26 TB/s'."""
    x = _sig3(x)
    for unit, scale in (("TB/s", 1e12), ("GB/s", 1e9)):
        if x >= scale:
            return f"{x / scale:.3g} {unit}"
    return f"{x / 1e6:.3g} MB/s"


def fmt_num(x: float | None, unit: str = "") -> str:
    """A count with an SI prefix: '12.9 GFLOP', '1.07 GB'; '-' for no value."""
    if x is None:
        return "-"
    x = _sig3(x)
    for suffix, scale in (("P", 1e15), ("T", 1e12), ("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if abs(x) >= scale:
            return f"{x / scale:.3g} {suffix}{unit}"
    return f"{x:.3g} {unit}".rstrip()


def fmt_pct(x: float | None) -> str:
    """A fraction as a whole percentage: 0.825 -> '82%' (rounded half to even);
    '-' for no value."""
    return "-" if x is None else f"{100 * x:.0f}%"


def fmt_change(x: float) -> str:
    """A relative change with its sign, one decimal: 0.196 -> '+19.6%'."""
    return f"{100 * x:+.1f}%"
