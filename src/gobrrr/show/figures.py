"""The report's figures as inline SVG, drawn with matplotlib from a report dict.

Figures are built on a bare Figure + Agg canvas (no pyplot: no global figure registry,
no backend switch in the user's process). Only numbers and our own labels are drawn;
names from the user's code (ops, modules) never go through matplotlib's text engine
(which would read `$...$` as mathtext): they reach the SVG as escaped <title> elements,
which browsers show on hover.
"""

from __future__ import annotations

import html
import io
import math
import re
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from functools import partial
from typing import Any

from gobrrr.show.budget_view import budget_parts
from gobrrr.show.colors import REGIME_COLORS
from gobrrr.units import fmt_flops, fmt_s

__all__ = ["svg_of", "budget_bar_svg", "roofline_svg", "batch_scaling_svg",
           "decode_batch_svg", "step_series_svg", "plottable_rows", "candidates_svg"]

# The parts of a script's run (script.py), in order, each its own marker color.
SERIES_COLORS = {"warm-up": "#999999", "timed": "#000000", "profiled": "#e69f00"}

_GID = "gobrrr-pt-"


@contextmanager
def figure_style() -> Iterator[None]:
    import matplotlib

    # A fixed hash salt makes clip-path ids (and so the file) reproducible; text stays
    # <text> (fonttype none): smaller, selectable, searchable in the page.
    with matplotlib.rc_context({"svg.hashsalt": "gobrrr", "svg.fonttype": "none",
                                "font.size": 9, "axes.spines.top": False,
                                "axes.spines.right": False}):
        yield


def new_figure(w_in: float, h_in: float) -> Any:
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(w_in, h_in))
    FigureCanvasAgg(fig)
    return fig


def svg_of(fig: Any, titles: dict[str, str] | None = None) -> str:
    """The figure as an <svg> element for inlining in HTML. `titles` maps an artist gid
    to a hover text, inserted as an escaped <title> child of that artist's group."""
    buf = io.StringIO()
    fig.savefig(buf, format="svg", metadata={"Date": None})  # no timestamp: reproducible
    text = buf.getvalue()
    text = text[text.find("<svg"):]  # drop the XML prolog and DOCTYPE: inline in HTML
    for gid, title in (titles or {}).items():
        tag = f"<title>{html.escape(title)}</title>"
        # A replacement *function*: the escaped title is inserted literally (no
        # backslash or group references read from user text).
        text = re.sub(f'(<g id="{re.escape(gid)}"[^>]*>)',
                      partial(_append, tag), text, count=1)
    return text


def _append(tag: str, m: re.Match[str]) -> str:
    return m.group(1) + tag


def budget_bar_svg(budget: dict[str, Any]) -> str:
    """Two stacked bars: T split into the budget's parts (overhead / memory / compute,
    and communication in distributed reports), and the busy (memory + compute) time
    split by whether its ops reach a quarter of their roofline."""
    total_s, parts_s = budget_parts(budget)
    shares = budget["fractions"]  # the budget's own: part / T
    busy_s = parts_s["memory"] + parts_s["compute"]
    below_s = min(budget["below_roof_s"], busy_s) if busy_s > 0 else 0.0
    thr = budget.get("below_roof_threshold", 0.25)
    with figure_style():
        fig = new_figure(8.0, 1.9)
        ax = fig.add_axes((0.19, 0.2, 0.78, 0.72))
        left = 0.0
        for regime, part_s in parts_s.items():
            share = shares[regime]
            ax.barh(1, share, left=left, height=0.6, color=REGIME_COLORS[regime],
                    edgecolor="white")
            if share >= 0.06:  # a label only where it fits inside its segment
                ax.text(left + share / 2, 1, f"{regime} {100 * share:.0f}%\n"
                        f"{fmt_s(part_s)}", ha="center", va="center",
                        color="white", fontsize=8.5, fontweight="bold")
            left += share
        if busy_s > 0 and total_s > 0:
            b_share = below_s / total_s
            ok_share = (busy_s - below_s) / total_s
            start = shares["overhead"]  # busy time follows overhead on the bar above
            ax.barh(0, b_share, left=start, height=0.45, color="#d62728", alpha=0.85)
            ax.barh(0, ok_share, left=start + b_share, height=0.45, color="#2ca02c",
                    alpha=0.6)
            label = (f"{100 * below_s / busy_s:.0f}% of busy time below {100 * thr:.0f}% "
                     "of roofline")
            ax.text(start + 0.005, -0.45, label, ha="left", va="center", fontsize=8)
        ax.set_xlim(0, 1)
        ax.set_ylim(-0.7, 1.4)
        ax.set_yticks([1, 0], ["wall time", "busy time"])
        ax.set_xticks([0, 0.25, 0.5, 0.75, 1.0], ["0", "25%", "50%", "75%", "100%"])
        ax.spines["left"].set_visible(False)
        return svg_of(fig)


def plottable_rows(rows: Sequence[dict[str, Any]]) -> tuple[list[int], list[int]]:
    """(indices of rows that can sit on a log-log roofline, indices that cannot: no
    FLOPs, no bytes or no time)."""
    on: list[int] = []
    off: list[int] = []
    for i, r in enumerate(rows):
        ok = r["flops"] > 0 and r["bytes"] > 0 and r["time_s"] > 0
        (on if ok else off).append(i)
    return on, off


def roofline_svg(rows: Sequence[dict[str, Any]], machine: dict[str, Any],
                 label_top: int = 12) -> str:
    """Log-log roofline on the measured ceilings: the bandwidth slope, one flat roof per
    measured matmul dtype (fp32 is also the roof for non-matmul math), and each row (an
    op name, rolled up over its calls) as a dot at (FLOPs/byte, achieved FLOP/s), its
    area proportional to its time, colored by its regime. The dot's number is its row
    number in the per-op table; hovering shows its name."""
    bw = machine["bandwidth_bytes_per_s"]
    peaks: dict[str, float] = dict(machine["peak_flops_per_s"])
    on, _ = plottable_rows(rows)
    total_t = sum(rows[i]["time_s"] for i in on) or 1.0
    xs = [rows[i]["flops"] / rows[i]["bytes"] for i in on]
    ys = [rows[i]["flops"] / rows[i]["time_s"] for i in on]
    ridges = [p / bw for p in peaks.values()]
    x_lo = min([*xs, min(ridges)]) / 8
    x_hi = max([*xs, max(ridges)]) * 8
    y_hi = max([*ys, *peaks.values()]) * 3
    y_lo = min([*ys, bw * x_lo]) / 3
    titles: dict[str, str] = {}
    with figure_style():
        fig = new_figure(8.0, 4.8)
        ax = fig.add_axes((0.1, 0.11, 0.74, 0.85))
        ax.set_xscale("log")
        ax.set_yscale("log")
        top = max(peaks.values())
        ax.plot([x_lo, top / bw], [bw * x_lo, top], color="#444", lw=1.5)
        ax.text(x_lo * 1.6, bw * x_lo * 2.2, f"memory {bw / 1e9:.3g} GB/s",
                rotation=0, fontsize=8, color="#444")
        label_log_y = math.inf
        for dtype, peak in sorted(peaks.items(), key=lambda kv: -kv[1]):
            ridge = peak / bw
            ax.plot([ridge, x_hi], [peak, peak], color="#444", lw=1.2,
                    ls="-" if peak == top else "--")
            # Roofs close together (bf16 and fp16 differ by ~5%) would print their labels
            # on top of each other: keep labels at least 0.17 decades apart, downwards.
            label_log_y = min(math.log10(peak), label_log_y - 0.17)
            ax.annotate(f"{dtype} {fmt_flops(peak)}", (x_hi, peak),
                        xytext=(x_hi * 1.1, 10**label_log_y), textcoords="data",
                        va="center", fontsize=8, annotation_clip=False)
        order = sorted(range(len(on)), key=lambda k: -rows[on[k]]["time_s"])
        for rank, k in enumerate(order):
            i = on[k]
            r = rows[i]
            gid = f"{_GID}{i}"
            area = 25 + 900 * r["time_s"] / total_t
            ax.scatter([xs[k]], [ys[k]], s=area, color=REGIME_COLORS.get(r["bound"], "#888"),
                       alpha=0.75, edgecolors="black", linewidths=0.5, gid=gid, zorder=3)
            frac = r.get("roofline_fraction")
            titles[gid] = (f"#{i + 1} {r['name']}: {fmt_s(r['time_s'])} in {r['calls']} "
                           f"calls, {xs[k]:.3g} FLOP/B, {fmt_flops(ys[k])}, {r['bound']}"
                           + (f", {100 * frac:.0f}% of roofline" if frac else ""))
            if rank < label_top:
                ax.annotate(str(i + 1), (xs[k], ys[k]), xytext=(5, 4),
                            textcoords="offset points", fontsize=8, zorder=4)
        for regime in ("overhead", "memory", "compute"):
            ax.scatter([], [], color=REGIME_COLORS[regime], label=f"{regime}-bound",
                       edgecolors="black", linewidths=0.5)
        ax.legend(loc="lower right", fontsize=8, frameon=False)
        ax.set_xlim(x_lo, x_hi)
        ax.set_ylim(y_lo, y_hi)
        ax.set_xlabel("arithmetic intensity (FLOPs per byte)")
        ax.set_ylabel("achieved FLOP/s")
        ax.grid(True, which="major", alpha=0.2)
        return svg_of(fig, titles)


def _by_batch(bs: list[int], measured: list[float]) -> tuple[Any, Any]:
    """A log-log figure over batch sizes with the measured line drawn (the batch
    experiments' figures)."""
    fig = new_figure(6.0, 3.2)
    ax = fig.add_axes((0.13, 0.16, 0.55, 0.78))
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.plot(bs, measured, "o-", color="black", label="measured")
    return fig, ax


def _label_batch_axes(ax: Any, bs: list[int], xlabel: str, ylabel: str) -> None:
    ax.set_xticks(bs, [str(b) for b in bs])
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.legend(loc="center left", bbox_to_anchor=(1.02, 0.5), fontsize=8, frameon=False)
    ax.grid(True, which="both", alpha=0.2)


def batch_scaling_svg(batch: dict[str, Any]) -> str | None:
    """Time per call against batch size, with what time would be if it grew like the
    FLOPs or like the bytes (the essay's caveat: both must be counted to read the
    experiment). None when fewer than two batch sizes ran."""
    pts = [p for p in batch.get("points", []) if p.get("time_s") and p.get("batch_size")]
    if len(pts) < 2:
        return None
    base = pts[0]
    bs = [p["batch_size"] for p in pts]
    with figure_style():
        fig, ax = _by_batch(bs, [p["time_s"] * 1e3 for p in pts])
        if base.get("flops") and all(p.get("flops") for p in pts):
            ax.plot(bs, [base["time_s"] * 1e3 * p["flops"] / base["flops"] for p in pts],
                    ls="--", color=REGIME_COLORS["compute"], label="if time ∝ FLOPs")
        if base.get("bytes") and all(p.get("bytes") for p in pts):
            ax.plot(bs, [base["time_s"] * 1e3 * p["bytes"] / base["bytes"] for p in pts],
                    ls=":", color=REGIME_COLORS["memory"], label="if time ∝ bytes")
        ax.plot(bs, [base["time_s"] * 1e3] * len(bs), ls="-.", color=REGIME_COLORS["overhead"],
                label="if time is overhead")
        pred = batch.get("predicted_time_ratio")
        two = next((p for p in pts if p["factor"] == 2), None)
        if pred and two:
            ax.plot([two["batch_size"]], [base["time_s"] * 1e3 * pred], marker="x",
                    ms=9, mew=2, ls="none", color="#d62728", label="budget's prediction")
        step = batch.get("predicted_step_ratio")
        four = next((p for p in pts if p["factor"] == 4), None)
        if step and two and four:  # from batch 1 the 2x -> 4x step is the check
            ax.plot([four["batch_size"]], [two["time_s"] * 1e3 * step], marker="x",
                    ms=9, mew=2, ls="none", color="#9467bd",
                    label="budget's prediction from 2x")
        _label_batch_axes(ax, bs, "batch size", "time per call (ms)")
        return svg_of(fig)


def decode_batch_svg(scaling: dict[str, Any]) -> str | None:
    """Decode tokens/s against batch (report 1.9: generation.batch_scaling), with the
    bandwidth and compute limits at each batch drawn: where the measured line bends is
    where decode stops being memory (or overhead) bound. None with fewer than two
    batches."""
    pts = scaling.get("points", [])
    if len(pts) < 2:
        return None
    bs = [p["batch"] for p in pts]
    with figure_style():
        fig, ax = _by_batch(bs, [p["tokens_per_s"] for p in pts])
        for key, label, regime, ls in (
                ("bandwidth_bound_tokens_per_s", "bandwidth limit", "memory", ":"),
                ("compute_bound_tokens_per_s", "compute limit", "compute", "--")):
            if all(p.get(key) for p in pts):
                ax.plot(bs, [p[key] for p in pts], ls=ls, color=REGIME_COLORS[regime],
                        label=label)
        _label_batch_axes(ax, bs, "batch (sequences)", "decode tokens/s")
        return svg_of(fig)


def candidates_svg(d: dict[str, Any]) -> str | None:
    """`optimize --generate`'s candidates (generation_optimize.py's dict) as tokens/s
    bars beside the baseline's line: verified ones green, rejected red. The names are
    gobrrr's own remedy names. None when nothing was measured."""
    rows = [c for c in d.get("candidates", []) if c.get("tokens_per_s")]
    if not rows:
        return None
    with figure_style():
        fig = new_figure(6.4, 0.45 * len(rows) + 1.0)
        ax = fig.add_subplot(1, 1, 1)
        ys = list(range(len(rows)))[::-1]
        ax.barh(ys, [c["tokens_per_s"] for c in rows],
                color=["#009e73" if c.get("passed") else "#d55e00" for c in rows])
        ax.set_yticks(ys, [c["name"] for c in rows])
        ax.axvline(d["baseline_tokens_per_s"], color="#000000", ls=":", label="baseline")
        ax.set_xlabel("tokens/s (measured A/B)")
        ax.legend(loc="lower right", frameon=False)
        fig.tight_layout()
        return svg_of(fig)


def step_series_svg(series: dict[str, Any]) -> str | None:
    """Every step's time in order (a script run in place: warm-up, timed, profiled),
    with the timed steps' mean: compile and warm-up, drift and spikes at a glance.
    None with fewer than two steps."""
    parts, walls = list(series.get("part", [])), list(series.get("wall_s", []))
    if len(walls) < 2 or len(parts) != len(walls):
        return None
    with figure_style():
        fig = new_figure(6.5, 2.6)
        ax = fig.add_axes((0.11, 0.18, 0.66, 0.74))
        xs = list(range(1, len(walls) + 1))
        for part, color in SERIES_COLORS.items():
            pts = [(x, w * 1e3) for x, p, w in zip(xs, parts, walls, strict=True)
                   if p == part]
            if pts:
                ax.plot([x for x, _ in pts], [y for _, y in pts], "o", ms=3.5,
                        color=color, label=part)
        timed = [w for p, w in zip(parts, walls, strict=True) if p == "timed"]
        if timed:
            mean = sum(timed) / len(timed) * 1e3
            ax.axhline(mean, ls="--", lw=1, color="#0072b2", label="timed mean")
        if max(walls) > 20 * min(w for w in walls if w > 0):  # a compile step: log scale
            ax.set_yscale("log")
        ax.set_xlabel("step")
        ax.set_ylabel("step time (ms)")
        ax.legend(loc="center left", bbox_to_anchor=(1.02, 0.5), fontsize=8, frameon=False)
        ax.grid(True, alpha=0.2)
        return svg_of(fig)
