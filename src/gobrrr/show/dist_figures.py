"""Figures of the multi-GPU work, as inline SVG from dicts (a saved JSON renders the
same): the projection's scaling efficiency vs GPU count with its assumptions written
beside it, and the measured communication ceilings (bus bandwidth vs message size)."""

from __future__ import annotations

from typing import Any

from gobrrr.show.colors import REGIME_COLORS
from gobrrr.show.figures import figure_style, new_figure, svg_of
from gobrrr.units import fmt_bytes_per_s

__all__ = ["projection_svg", "comm_ceilings_svg", "rank_split_svg"]

_COLORS = {"ddp": "#1f78b4", "fsdp": "#9b2d9b", "all_reduce": "#1f78b4",
           "all_gather": "#d99a00", "reduce_scatter": "#9b2d9b"}


def _assumption_text(value: Any) -> str:
    if isinstance(value, float) and value >= 1e6:
        return fmt_bytes_per_s(value)
    if isinstance(value, float):
        return f"{value:.3g}"
    return str(value)


def rank_split_svg(ranks: list[dict[str, Any]]) -> str:
    """One stacked bar per rank: its step split overhead / memory / compute /
    communication (the budget's four parts, shares of its T_wall)."""
    order = ("overhead", "memory", "compute", "communication")
    with figure_style():
        fig = new_figure(8.0, 0.6 + 0.45 * len(ranks))
        ax = fig.add_axes((0.12, 0.25, 0.85, 0.7))
        for i, r in enumerate(ranks):
            y = len(ranks) - 1 - i
            left = 0.0
            for k in order:
                share = float(r["fractions"].get(k, 0.0))
                ax.barh(y, share, left=left, height=0.6, edgecolor="white",
                        color=REGIME_COLORS[k])
                if share >= 0.08:  # a label only where it fits
                    ax.text(left + share / 2, y, f"{k} {100 * share:.0f}%", ha="center",
                            va="center", color="white", fontsize=7.5, fontweight="bold")
                left += share
        ax.set_xlim(0, 1)
        ax.set_yticks(range(len(ranks)), [f"rank {r['rank']}" for r in reversed(ranks)])
        ax.set_xticks([0, 0.25, 0.5, 0.75, 1.0], ["0", "25%", "50%", "75%", "100%"])
        ax.spines["left"].set_visible(False)
        return svg_of(fig)


def projection_svg(proj: dict[str, Any]) -> str:
    """Scaling efficiency of DDP and FSDP vs GPUs (log2), a line where jobs leave one
    node, and the assumptions and sensitivity as text to the right."""
    rows = proj["rows"]
    ns = [r["n_gpus"] for r in rows]
    with figure_style():
        fig = new_figure(8.0, 3.4)
        ax = fig.add_axes((0.08, 0.15, 0.44, 0.78))
        ax.set_xscale("log", base=2)
        for strategy in ("ddp", "fsdp"):
            ax.plot(ns, [100 * r[f"{strategy}_efficiency"] for r in rows], "o-", ms=3,
                    color=_COLORS[strategy], label=strategy.upper())
        multi = [r["n_gpus"] for r in rows if r["nodes"] > 1]
        if multi:
            ax.axvline(multi[0], color="#888", lw=0.8, ls="--")
            ax.text(multi[0], 3, " more than one node", fontsize=7, color="#555")
        ax.set_ylim(0, 105)
        ax.set_xticks(ns, [str(n) for n in ns], fontsize=7)
        ax.set_xlabel("GPUs")
        ax.set_ylabel("scaling efficiency (%)")
        ax.grid(True, alpha=0.2)
        ax.legend(loc="lower left", fontsize=8, frameon=False)
        lines = ["assumptions:"]
        for a in proj["assumptions"]:
            lines.append(f"  {a['name']}: {_assumption_text(a['value'])}")
        lines.append("")
        lines.append(f"sensitivity at {proj['sensitivity_at']} GPUs (DDP / FSDP):")
        for s in proj["sensitivity"]:
            lines.append(f"  {s['assumption']} {s['value']}: "
                         f"{100 * s['ddp_efficiency']:.0f}% / {100 * s['fsdp_efficiency']:.0f}%")
        # Only our own numbers and labels: no user text goes through mathtext.
        fig.text(0.55, 0.93, "\n".join(lines).replace("$", ""), fontsize=6.5, va="top",
                 family="monospace")
        return svg_of(fig)


def comm_ceilings_svg(ceil: dict[str, Any]) -> str:
    """Bus bandwidth vs size (S) per collective, with the link's datasheet peak per
    direction as a dashed line when known."""
    with figure_style():
        fig = new_figure(6.0, 3.2)
        ax = fig.add_axes((0.12, 0.15, 0.84, 0.8))
        ax.set_xscale("log", base=2)
        for c in ("all_reduce", "all_gather", "reduce_scatter"):
            pts = sorted((p for p in ceil["points"] if p["collective"] == c),
                         key=lambda p: p["size_bytes"])
            if pts:
                ax.plot([p["size_bytes"] for p in pts],
                        [p["busbw_bytes_per_s"] / 1e9 for p in pts], "o-", ms=3,
                        color=_COLORS[c], label=c)
        sheet = ceil.get("datasheet")
        if sheet:
            peak = sheet["bytes_per_s_per_direction"] / 1e9
            ax.axhline(peak, color="#444", ls="--", lw=0.8)
            ax.text(ax.get_xlim()[0], peak * 1.02, f" datasheet {peak:.0f} GB/s per direction",
                    fontsize=7)
        ax.set_xlabel("size S (bytes)")
        ax.set_ylabel("bus bandwidth (GB/s)")
        ax.grid(True, alpha=0.2)
        ax.legend(loc="upper left", fontsize=8, frameon=False)
        return svg_of(fig)
