"""Terminal rendering with rich. Presentation only: takes results, measures nothing.
The doctor report is rendered from its dict (`Report.to_dict()`, or a saved --json), as
the HTML page is, so a saved report prints as doctor printed it."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

from gobrrr.show.budget_view import (
    MODULES_TITLE,
    OP_CALLS,
    UNEXPLAINED,
    UNEXPLAINED_NOTE,
    above_roof,
    agreement_tone,
    budget_parts,
    cause_text,
    phase_rows,
    roof_band,
    verdict_headline,
)
from gobrrr.show.colors import REGIME_COLORS
from gobrrr.units import fmt_bytes_per_s, fmt_change, fmt_flops, fmt_num, fmt_s

if TYPE_CHECKING:
    from rich.console import Console
    from rich.table import Table

    from gobrrr.compare import Comparison
    from gobrrr.dist.ceilings import CommCeilings
    from gobrrr.dist.projection import Projection
    from gobrrr.hardware import Ceilings
    from gobrrr.lab import LabReport
    from gobrrr.remedies.result import OptimizeResult

__all__ = ["printable", "console", "print_table", "print_ceilings", "print_report",
           "print_optimize", "print_comparison", "print_lab", "print_comm_ceilings",
           "print_projection", "print_distributed", "print_memory",
           "print_memory_remedies", "print_throughput"]



def console() -> Console:
    """stdout console. Honours NO_COLOR / FORCE_COLOR and COLUMNS (rich reads them) and
    TERMINAL_WIDTH (rich does not: read here, as typer does); otherwise never wider than
    100 columns, so tables stay readable on a wide terminal and fit an 80-column one,
    and 100 columns when the output is not a terminal."""
    from rich.console import Console

    width: int | None = None
    raw = os.environ.get("TERMINAL_WIDTH", "").strip()
    if raw.isdigit() and int(raw) > 0:
        width = int(raw)
    c = Console(highlight=False, width=width)
    if width is None and not os.environ.get("COLUMNS") and (c.width > 100
                                                            or not c.is_terminal):
        # piped or redirected, rich assumes 80 columns and splits op names across lines
        # (issue 25: "aten::_safe_softma" / "x"); a log or a file has no screen to fit
        c.width = 100
    return c


def print_table(out: Console, table: Table) -> None:
    """Print a table by one rule (issue 25: names split as "aten::_safe_softma" / "x",
    cells broken as "for mat"): a cell wraps between words, never inside one, so a name
    (one word: "aten::_scaled_dot_product_flash_attention_for_cpu",
    "GPT2LMHeadModel.transformer.h.0.mlp.c_proj") is always whole; a right-justified
    column (numbers) never wraps. Each column is at least its longest word wide; when
    those widths exceed the console, the table is printed at its own width, wider than
    the console: a pipe or a file has no screen to fit, and a terminal wraps the long
    line while the name stays whole to read and copy."""
    from rich.measure import Measurement
    from rich.text import Text

    for col in table.columns:
        texts = [c if isinstance(c, Text) else Text.from_markup(c) if isinstance(c, str)
                 else None for c in (col.header, *col.cells)]
        plain = [t.plain for t in texts if t is not None]
        if col.justify == "right":
            col.no_wrap = True
            longest = max((len(line) for p in plain for line in p.splitlines()), default=0)
        else:
            longest = max((len(w) for p in plain for w in p.split()), default=0)
        col.min_width = max(col.min_width or 0, longest)
    need = Measurement.get(out, out.options.update_width(10_000), table).minimum
    if need <= out.width:
        out.print(table)
        return
    width = out.width
    out.width = need
    try:
        out.print(table)
    finally:
        out.width = width


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
        f"bandwidth ({ceil.bandwidth_kernel})" if ceil.bandwidth_kernel else "bandwidth",
        fmt_bytes_per_s(ceil.bandwidth_bytes_per_s),
        fmt_bytes_per_s(sheet_bw) if sheet_bw else "-",
        f"{100 * ceil.bandwidth_bytes_per_s / sheet_bw:.0f}%" if sheet_bw else "-",
    )
    table.add_row("eager per-op cost", fmt_s(ceil.op_overhead_s), "-", "-")
    table.add_row("Python float adds", f"{ceil.python_ops_per_s / 1e6:.3g} M/s", "-", "-")
    if ceil.compiled_call_s is not None and ceil.compiled_tensor_s is not None:
        table.add_row("compiled call (host)", f"{fmt_s(ceil.compiled_call_s)} + "
                      f"{fmt_s(ceil.compiled_tensor_s)}/tensor", "-", "-")
    out = console()
    print_table(out, table)
    math = _math_table(ceil)
    if math is not None:
        print_table(out, math)
    ridge = ", ".join(
        f"{d} {ceil.ridge_flops_per_byte(d):.0f}" for d in ceil.peak_flops_per_s
    )
    out.print(f"ridge points (FLOP/byte): {ridge}")
    src = f"datasheet: {entry.source}" if entry else "no datasheet entry for this device"
    out.print(f"[dim]{ceil.source} {ceil.measured_at} in {ceil.calibrate_s:.1f} s; {src}[/dim]")


def _fmt_size(n: int) -> str:
    """Bytes in binary units, as collective sizes are chosen: '1 KiB', '64 MiB'."""
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= scale:
            return f"{n / scale:.4g} {unit}"
    return f"{n} B"


def print_comm_ceilings(ceil: CommCeilings) -> None:
    """One row per size: algbw and busbw (GB/s) of each collective; then each collective's
    best busbw beside the link's datasheet peak per direction."""
    from rich.table import Table

    topo = ceil.topology
    names = topo.get("gpu_names") or [topo.get("cpu_name", "cpu")]
    nccl = f", NCCL {topo['nccl_version']}" if topo.get("nccl_version") else ""
    count = f" x{len(names)}" if len(names) > 1 else ""
    nv = f" (NV{topo['nvlinks']})" if topo.get("nvlinks") else ""
    title = (f"{ceil.world_size} ranks, {ceil.backend}{nccl}: {names[0]}{count}, "
             f"links {topo.get('link_type')}{nv}")
    table = Table(title=title, title_justify="left")
    table.add_column("size (S)", justify="right")
    collectives = [c for c in ("all_reduce", "all_gather", "reduce_scatter") if ceil.curve(c)]
    short = {"all_reduce": "AR", "all_gather": "AG", "reduce_scatter": "RS"}
    for c in collectives:
        table.add_column(f"{short[c]} algbw\nGB/s", justify="right")
        table.add_column(f"{short[c]} busbw\nGB/s", justify="right")
    by_size: dict[int, dict[str, tuple[float, float]]] = {}
    for p in ceil.points:
        by_size.setdefault(p.size_bytes, {})[p.collective] = (p.algbw_bytes_per_s,
                                                              p.busbw_bytes_per_s)
    for size in sorted(by_size):
        row = [_fmt_size(size)]
        for c in collectives:
            alg, bus = by_size[size].get(c, (None, None))
            row += ["-" if alg is None else f"{alg / 1e9:.3g}",
                    "-" if bus is None else f"{bus / 1e9:.3g}"]
        table.add_row(*row)
    out = console()
    print_table(out, table)
    entry = ceil.datasheet()
    for c in collectives:
        best = ceil.peak_busbw(c)
        pct = (f", {100 * best / entry.bytes_per_s_per_direction:.0f}% of the datasheet's "
               f"{fmt_bytes_per_s(entry.bytes_per_s_per_direction)} per direction"
               if entry else "")
        out.print(f"{c}: best busbw {fmt_bytes_per_s(best)}{pct}")
    src = (f"datasheet: {entry.name}, {entry.source}" if entry
           else "no datasheet entry for this link")
    out.print(f"[dim]AR all_reduce, AG all_gather, RS reduce_scatter. busbw = algbw x "
              f"2(n-1)/n (AR), x (n-1)/n (AG, RS); S is the total array, as nccl-tests "
              f"counts it. {src}[/dim]")
    out.print(f"[dim]{ceil.source} {ceil.measured_at} in {ceil.calibrate_s:.1f} s[/dim]")


def print_projection(proj: Projection) -> None:
    """The projection's table (step time and efficiency per GPU count, DDP and FSDP), its
    assumptions and the sensitivity lines."""
    from rich.markup import escape
    from rich.table import Table

    table = Table(title="Projected scaling (weak: same per-GPU batch)", title_justify="left")
    for name in ("GPUs", "nodes", "DDP comm", "DDP step", "DDP eff.", "FSDP comm",
                 "FSDP step", "FSDP eff."):
        table.add_column(name, justify="right")
    for r in proj.rows:
        table.add_row(str(r.n_gpus), str(r.nodes), fmt_s(r.ddp_comm_s), fmt_s(r.ddp_step_s),
                      f"{100 * r.ddp_efficiency:.0f}%", fmt_s(r.fsdp_comm_s),
                      fmt_s(r.fsdp_step_s), f"{100 * r.fsdp_efficiency:.0f}%")
    out = console()
    print_table(out, table)
    out.print("assumptions:")
    for a in proj.assumptions:
        v = a["value"]
        shown = (fmt_bytes_per_s(v) if isinstance(v, float) and v >= 1e6
                 else f"{v:.3g}" if isinstance(v, float) else str(v))
        out.print(escape(f"  {a['name']}: {shown} ({a['source']})"))
    out.print(f"sensitivity at {proj.sensitivity_at} GPUs (efficiency DDP / FSDP):")
    for s in proj.sensitivity:
        out.print(escape(f"  {s['assumption']} {s['value']}: "
                         f"{100 * s['ddp_efficiency']:.0f}% / "
                         f"{100 * s['fsdp_efficiency']:.0f}% "
                         f"({s['ddp_change_points']:+.0f} / "
                         f"{s['fsdp_change_points']:+.0f} points)"))
    out.print(escape(proj.conclusion))


def _math_table(ceil: Ceilings) -> Any:
    """Element-wise math rates beside the bandwidth: a probe far below the bandwidth met
    its instruction bound (hardware.py's docstring)."""
    from rich.table import Table

    from gobrrr.hardware import MATH_KINDS

    if not (ceil.exp_elems_per_s or ceil.softmax_elems_per_s):
        return None
    row = ceil.details.get("math_row")
    t = Table(title="element-wise math (elements/s; bytes/s = read + write once)",
              title_justify="left")
    for col in ("probe", "dtype", "elements/s", "bytes/s", "% of bandwidth"):
        t.add_column(col, justify="left" if col in ("probe", "dtype") else "right")
    for kind in MATH_KINDS:
        rates = ceil.exp_elems_per_s if kind == "exp" else ceil.softmax_elems_per_s
        for dtype, rate in rates.items():
            bps = ceil.math_bytes_per_s(kind, dtype)
            t.add_row(f"softmax (rows of {row})" if kind == "softmax" and row else kind,
                      dtype, fmt_num(rate, "elem/s"), fmt_bytes_per_s(bps) if bps else "-",
                      f"{100 * bps / ceil.bandwidth_bytes_per_s:.0f}%" if bps else "-")
    return t


_BAND_MARK = {"<25%": "[red]*[/]", "25-50%": "[yellow]+[/]"}
_ABOVE_ROOF_MARK = "^"  # over 100% of its roofline (budget_view.above_roof)
# budget_view.agreement_tone -> style: green means the experiments agree, nothing else
_AGREEMENT_STYLE = {"agree": "green", "disagree": "yellow", "none": "dim"}


def _budget_bar(fractions: dict[str, float], width: int) -> str:
    """A stacked bar of the budget's parts (three, or four with communication), one
    character per 1/width of wall time."""
    cells = []
    used = 0
    keys = list(fractions)  # the budget's order; communication last, distributed only
    for i, k in enumerate(keys):
        n = width - used if i == len(keys) - 1 else round(fractions[k] * width)
        n = max(0, min(n, width - used))
        used += n
        cells.append(f"[{REGIME_COLORS[k]}]{'█' * n}[/]")
    return "".join(cells)


def print_distributed(d: dict[str, Any]) -> None:
    """The distributed section: each rank's four-way split, its communication beside the
    no_sync bound, the collectives against their ceilings, and the projection."""
    from rich.markup import escape
    from rich.table import Table

    from gobrrr.dist.projection import Projection

    out = console()
    t = Table(title=f"ranks ({d['world_size']}, {d['backend']})", title_justify="left")
    # short headers: ten columns in an 80-column terminal (the legend below the table)
    for c in ("rank", "T_wall", "ovh", "mem", "comp", "comm", "xfer", "wait (prof.)",
              "DDP copies", "no_sync"):
        t.add_column(c, justify="right")
    for r in d["ranks"]:
        f = r["fractions"]
        cmp = r.get("no_sync_comparison")
        t.add_row(str(r["rank"]), fmt_s(r["wall_s"]),
                  *(f"{100 * f.get(k, 0):.0f}%" for k in ("overhead", "memory", "compute",
                                                          "communication")),
                  fmt_s(r["exposed_transfer_s"]),
                  f"{fmt_s(r['exposed_waiting_s'])} "
                  f"({fmt_s(r.get('exposed_waiting_profiled_s', r['exposed_waiting_s']))})",
                  fmt_s(r.get("ddp_bucket_copy_s", 0.0)),
                  f"{100 * cmp['bound_fraction']:.0f}%" if cmp else "-")
    print_table(out, t)
    out.print("[dim]  overhead, memory, compute, communication (shares of T_wall); exposed "
              "transfer; waiting used (profiled); DDP's bucket copies; the no_sync bound"
              "[/dim]")
    for r in d["ranks"]:
        cmp = r.get("no_sync_comparison")
        if cmp:
            out.print(escape(f"  rank {r['rank']}: exposed communication "
                             f"{100 * cmp['exposed_fraction']:.0f}%, with DDP's bucket "
                             f"copies {100 * cmp['with_bucket_copies_fraction']:.0f}%, "
                             f"no_sync bound {100 * cmp['bound_fraction']:.0f}%: "
                             f"{cmp['explanation']}"))
    for s in d["stragglers"]:
        out.print(f"  straggler: rank {s['rank']} ({100 * s['share_of_step']:.0f}% of the "
                  "step for each peer)")
    for c in d["collectives"]:
        pct = c.get("pct_of_ceiling")
        bus = c.get("busbw_gbps")
        out.print(f"  {c['collective']} {_fmt_size(c['bytes']) if c['bytes'] else '?'} x "
                  f"{c['calls_per_step']:g}/step: "
                  + (f"{bus:.1f} GB/s busbw" if bus is not None else "no busbw")
                  + (f", {100 * pct:.0f}% of the calibrated ceiling" if pct is not None
                     else ""))
    if d.get("projection"):
        out.print(f"[dim]projection bandwidth: {escape(str(d.get('projection_bandwidth')))}"
                  "[/dim]")
        print_projection(Projection.from_dict(d["projection"]))
        chk = d.get("projection_check")
        if chk:
            out.print(f"  check: {chk['n_gpus']} GPUs projected {fmt_s(chk['projected_step_s'])}"
                      f", measured {fmt_s(chk['measured_step_s'])} "
                      f"({100 * chk['rel_error']:+.0f}%)")


# C0 and C1 control characters but tab and newline: what a name from a trace or the
# user's code may carry that a terminal would act on (an ESC[2J clears the screen).
_CONTROL = dict.fromkeys([*range(0, 9), *range(11, 32), 127, *range(128, 160)])


def printable(text: str) -> str:
    """`text` with each control character shown as its escape (\\x1b), so that a
    module name from a trace cannot move the cursor or clear the screen."""
    if not any(ord(c) in _CONTROL for c in text):
        return text
    return "".join(f"\\x{ord(c):02x}" if ord(c) in _CONTROL else c for c in text)


def _printable_tree(x: Any) -> Any:
    if isinstance(x, str):
        return printable(x)
    if isinstance(x, dict):
        return {k: _printable_tree(v) for k, v in x.items()}
    if isinstance(x, list):
        return [_printable_tree(v) for v in x]
    return x


def generation_lines(g: dict[str, Any]) -> list[str]:
    """A generation's prefill and decode, as the report's `generation` holds them."""
    pre, dec = g["prefill"], g["decode"]
    mfu = "" if pre.get("mfu") is None else f", {pre['mfu']:.1%} of the compute peak (MFU)"
    tps = "" if pre.get("tokens_per_s") is None else f", {pre['tokens_per_s']:,.0f} tokens/s"
    lines = [f"generation: {g['new_tokens']} new tokens after {g['batch']} x "
             f"{g['prompt_len']} prompt tokens, prefill "
             f"{100 * g.get('share_prefill', 0):.0f}% of its time",
             f"  prefill {fmt_s(pre['seconds'])}{tps}{mfu}"]
    bound = ""
    if dec.get("bound_tokens_per_s"):
        bound = (f" of a bandwidth bound of {dec['bound_tokens_per_s']:,.0f} "
                 f"({fmt_num(dec['step_bytes'], 'B')} a step): {dec['mbu']:.1%} (MBU)")
    lines.append(f"  decode {fmt_s(dec['median_step_s'])} a step, "
                 f"{dec['tokens_per_s']:,.1f} tokens/s{bound}")
    split = dec.get("split")  # report 1.12: the decode step's own split
    if split:
        sh = split["shares"]
        lines.append(f"  decode step: overhead {sh['overhead']:.0%}, memory "
                     f"{sh['memory']:.0%}, compute {sh['compute']:.0%} (ops busy "
                     f"{fmt_s(split['busy_s'])} of the {fmt_s(split['step_s'])} step)")
    bs = g.get("batch_scaling")  # report 1.9: the decode batch experiment
    if bs and bs["points"]:
        lines.append("  decode tokens/s by batch: " + " · ".join(
            f"{p['batch']}: {p['tokens_per_s']:,.1f}" for p in bs["points"])
            + f" ({bs['stopped']})")
        best = max(bs["points"], key=lambda p: p["tokens_per_s"])
        roofs = [f"{name} roof {best[key]:,.0f}" for name, key in (
            ("bandwidth", "bandwidth_bound_tokens_per_s"),
            ("compute", "compute_bound_tokens_per_s")) if best.get(key)]
        if roofs:
            lines.append(f"  at batch {best['batch']}: " + ", ".join(roofs) + " tokens/s"
                         + (f" (the lower: {best['limit']})" if best.get("limit") else ""))
    ps = g.get("prompt_scaling")  # report 1.10: the prompt-length experiment
    if ps and ps["points"]:
        lines.append("  prefill tokens/s by prompt length: " + " · ".join(
            f"{p['prompt_len']}: {p['tokens_per_s']:,.0f}"
            + (f" (MFU {p['mfu']:.0%})" if p.get("mfu") is not None else "")
            for p in ps["points"]) + f" ({ps['stopped']})")
    dg = g.get("decode_graph")  # report 1.11: the decode step's CUDA-graph experiment
    if dg:
        lines.append("  " + dg["summary"])
    return lines


def trace_check_lines(rows: list[dict[str, Any]]) -> list[str]:
    """A trace's health check (report 1.9: workload.trace.check), one line a row, its
    gaps marked GAP."""
    width = max((len(r["item"]) for r in rows), default=0)
    return [f"{'ok ' if r['ok'] else 'GAP'} {r['item']:<{width}}  {r['detail']}"
            for r in rows]


def print_report(report: dict[str, Any]) -> None:
    """The doctor (or analyze) report on stdout, from its dict (`Report.to_dict()`, or a
    saved --json of any 1.x version): every number is read from it as the saved JSON
    holds it (jsontext.as_saved: what `gobrrr show` of the file prints); every string
    made printable (control characters escaped)."""
    from rich.markup import escape

    from gobrrr.jsontext import as_saved

    out = console()
    report = _printable_tree(as_saved(report))
    d, b, v = report, report["budget"], report["verdict"]
    machine = d["machine"]
    fp = machine["fingerprint"]
    w = d["workload"]
    total_s, parts_s = budget_parts(b)
    # Names from the user's code are escaped: "[x]" in a module name is not rich markup.
    trace = w.get("trace") if w.get("source") == "trace" else None
    script = w.get("script") if w.get("source") == "script" else None
    if trace:
        command, what = "analyze", f"({trace['steps']} profiled steps)"
    elif script:
        command, what = "run", (f"({script['timed']} steps timed in place, "
                                f"{script['steps_from']} steps)")
    else:
        command, what = "doctor", f"(batch {w['batch_size']})"
    out.print(f"[bold]gobrrr {command}[/bold]  "
              f"{escape(w['name'])} {what} on {fp.get('name')} "
              f"[dim]torch {fp.get('torch')}[/dim]")
    if w.get("model"):  # a model target: dtype, mode and sizes matter to read it
        out.print(f"[dim]{escape(w['description'])}[/dim]")
    if trace and trace.get("check"):  # report 1.9: what the trace holds, before the rest
        out.print("trace check:")
        for line in trace_check_lines(trace["check"]):
            style = "dim" if line.startswith("ok") else "yellow"
            out.print(f"  [{style}]{escape(line)}[/]")
    cause = f" (most of it {v['cause']}: input-bound)" if v.get("cause") else ""
    out.print(f"{verdict_headline(v, lambda text, r: f'[bold {REGIME_COLORS[r]}]{text}[/]')}"
              f" of {fmt_s(total_s)} per "
              f"{'step' if trace or script else 'call'}{cause}")
    for line in v["evidence"]:
        out.print(f"  - {escape(line)}")
    # green only for an agreement: "no experiment could check the budget" is no news
    out.print(f"  [{_AGREEMENT_STYLE[agreement_tone(v)]}]{escape(v['agreement'])}[/]")
    width = min(60, max(20, out.width - 20))
    out.print(_budget_bar(b["fractions"], width))
    out.print("  ".join(
        f"[{REGIME_COLORS[k]}]{k} {fmt_s(s)} ({100 * b['fractions'][k]:.0f}%)[/]"
        for k, s in parts_s.items()))
    if d.get("phases") and (script or d.get("data_loading") or d.get("generation")):
        out.print("step: " + " · ".join(
            f"{escape(name)} {fmt_s(p['seconds'])} ({100 * p['share']:.0f}%)"
            for name, p in d["phases"].items()))
    if d.get("generation"):  # report 1.8+: doctor --generate
        for line in generation_lines(d["generation"]):
            out.print(escape(line))
    if d.get("memory"):  # report 1.10+: what one step keeps alive
        out.print(memory_line(d["memory"]))
    low_s = b.get("low_roof_s")  # report 1.5+
    if b["below_roof_s"] > 0 or (low_s or 0) > 0:
        low = ("" if low_s is None else
               f", {fmt_s(low_s)} from there to {100 * b['low_roof_threshold']:.0f}%")
        out.print(f"[dim]{fmt_s(b['below_roof_s'])} of device time in ops under "
                  f"{100 * b['below_roof_threshold']:.0f}% of their own roofline{low}[/dim]")
    phases = phase_rows(b)
    if phases:
        print_table(out, _phase_table(phases, total_s))
    print_table(out, _rows_table("top ops (device time)", b["per_op"], 8))
    print_table(out, _rows_table(MODULES_TITLE, b["per_module"], 6, OP_CALLS))
    shown = b["per_op"][:8] + b["per_module"][:6]
    legend = [f"{mark} {text}" for mark, text, band in (
        ("[red]*[/red]", "under 25% of its own roofline", "<25%"),
        ("[yellow]+[/yellow]", "25-50% of it", "25-50%")) if any(
            roof_band(row) == band for row in shown)]
    if any(above_roof(row) for row in shown):
        legend.append(f"{_ABOVE_ROOF_MARK} over 100% of its roofline: faster than the "
                      "measured ceilings (data served from cache, above the memory "
                      "bandwidth the roof is measured at; or a time measured short)")
    if any(row.get("limit") == "instruction" for row in shown):
        legend.append("instr.: compute-bound by element-wise instruction throughput "
                      "(calibrated), not FLOPs or bytes")
    if legend:
        out.print(f"[dim]{'; '.join(legend)}[/dim]")
    flagged = [row for row in b["per_op"]
               if row.get("limit") == "instruction" or roof_band(row)]
    if flagged:
        out.print("[bold]below their roof[/bold] (why: the arithmetic, or the likely cause)")
    for row in flagged[:5]:
        frac = row["roofline_fraction"]
        where = f"{100 * frac:.0f}% of roof" if frac is not None else "no roofline"
        out.print(f"  {escape(row['name'])} {fmt_s(row['time_s'])}, {where}: "
                  f"{escape(cause_text(row))}")
    if any(cause_text(row).startswith(UNEXPLAINED) for row in flagged[:5]):
        out.print(f"  [dim]{escape(UNEXPLAINED_NOTE)}[/dim]")
    if d["remedies"]:
        print_table(out, _remedies_table(d["remedies"]))
    if d["counts"]["uncounted_ops"]:
        out.print(f"[dim]ops with no FLOP formula: "
                  f"{', '.join(d['counts']['uncounted_ops'])}[/dim]")
    if d.get("distributed") is not None:
        print_distributed(d["distributed"])
    t = d["timing"]
    if trace and trace.get("step_given_s") is not None:
        out.print(f"[dim]T_wall: {fmt_s(trace['step_given_s'])} per step as given "
                  f"(--step-ms); the trace's {trace['steps']} profiled steps took "
                  f"{fmt_s(trace['traced_step_s'])}; ceilings {machine['source']}; "
                  f"analysed in {d['diagnose_s']:.1f} s[/dim]")
        return
    if trace:
        out.print(f"[dim]T_wall: mean span of {t['n_samples']} profiled steps (median "
                  f"{fmt_s(t['median_s'])}, IQR {100 * t['rel_iqr']:.1f}%); "
                  f"ceilings {machine['source']}; analysed in {d['diagnose_s']:.1f} s[/dim]")
        return
    out.print(f"[dim]T_wall median of {t['n_samples']} samples x "
              f"{t['calls_per_sample']} calls (IQR {100 * t['rel_iqr']:.1f}%); "
              f"ceilings {machine['source']} {machine['measured_at']}; "
              f"diagnosed in {d['diagnose_s']:.1f} s[/dim]")


def _rows_table(title: str, rows: list[dict[str, Any]], n: int,
               count: str = "calls") -> Any:
    """The top `n` rows (budget.RowBudget dicts) with their roofline reading; `count`
    heads the calls column (OP_CALLS where a row groups several ops)."""
    from rich.markup import escape
    from rich.table import Table

    # No outer edge and a one-word bound column: at 80 columns the names get the room.
    t = Table(title=title, title_justify="left", show_edge=False)
    t.add_column("name")  # whole (print_table), however long
    for col in (count, "time", "FLOP/B", "achieved", "% roof"):
        t.add_column(col, justify="right")
    t.add_column("bound", min_width=9, no_wrap=True)
    for row in rows[:n]:
        inten = row["intensity_flops_per_byte"]
        frac = row["roofline_fraction"]
        ach = (fmt_flops(row["achieved_flops_per_s"]) if row["bound"] == "compute"
               and row["achieved_flops_per_s"] else
               fmt_bytes_per_s(row["achieved_bytes_per_s"]) if row["achieved_bytes_per_s"]
               else "-")
        bound = "instr." if row.get("limit") == "instruction" else row["bound"]
        t.add_row(escape(row["name"]), str(row["calls"]), fmt_s(row["time_s"]),
                  f"{inten:.3g}" if inten is not None else "-", ach,
                  (f"{100 * frac:.0f}%" if frac is not None else "-")
                  + _BAND_MARK.get(roof_band(row) or "", "")
                  + (_ABOVE_ROOF_MARK if above_roof(row) else ""),
                  f"[{REGIME_COLORS.get(row['bound'], 'white')}]{bound}[/]")
    return t


def _phase_table(rows: list[dict[str, Any]], total_s: float) -> Any:
    """Time by phase (forward, backward, optimizer, ...): each phase's own bound, so a
    step that mixes regimes is read apart."""
    from rich.markup import escape
    from rich.table import Table

    t = Table(title="time by phase", title_justify="left", show_edge=False)
    t.add_column("name")
    for col in (OP_CALLS, "time", "% of T"):
        t.add_column(col, justify="right")
    t.add_column("bound", min_width=9, no_wrap=True)
    for row in rows:
        t.add_row(escape(row["name"]), str(row["calls"]), fmt_s(row["time_s"]),
                  f"{100 * row['time_s'] / total_s:.1f}%" if total_s > 0 else "-",
                  f"[{REGIME_COLORS.get(row['bound'], 'white')}]{row['bound']}[/]")
    return t


def _remedies_table(remedies: list[dict[str, Any]]) -> Any:
    from rich.table import Table

    t = Table(title="remedies (predicted from the budget; `gobrrr optimize` verifies)",
              title_justify="left")
    t.add_column("remedy")
    t.add_column("for")
    t.add_column("predicted", justify="right")
    t.add_column("why")
    for rem in remedies:
        pred = rem.get("predicted_speedup")
        t.add_row(rem["name"], rem["regime"], f"{pred:.2f}x" if pred else "-", rem["basis"])
    return t


_STATUS_STYLE = {"verified": "green", "rejected": "red", "failed": "red", "slower": "yellow",
                 "no significant change": "dim", "not applicable": "dim", "advice": "cyan",
                 "unverifiable": "magenta", "skipped": "blue"}
# Table order: what can be used first, then what could not be judged, then failures,
# then what did not run (skipped: the search's choice; not applicable: the workload's).
_STATUS_RANK = {"verified": 0, "no significant change": 1, "slower": 2, "advice": 3,
                "unverifiable": 4, "rejected": 5, "failed": 6, "skipped": 7,
                "not applicable": 8}


def _x(v: float | None) -> str:
    return "-" if v is None else f"{v:.2f}x"


def print_generation_optimize(d: dict[str, Any]) -> None:
    """`gobrrr optimize hf:NAME --generate N`'s result (generation_optimize.py's dict)."""
    from rich.markup import escape
    from rich.table import Table

    out = console()
    out.print(f"[bold]gobrrr optimize --generate[/bold]  {escape(d['name'])} on "
              f"{d['device']}: batch {d['batch']}, {d['prompt_len']}-token prompt, "
              f"{d['new_tokens']} new tokens, {d['dtype']}; baseline "
              f"{d['baseline_tokens_per_s']:,.1f} tokens/s")
    t = Table(show_edge=False)
    for col, just in (("candidate", "left"), ("tokens/s", "right"), ("speedup", "right"),
                      ("warm-up", "right"), ("top-1", "right"), ("rel err", "right"),
                      ("verdict", "left")):
        t.add_column(col, justify=just)  # type: ignore[arg-type]
    for c in d["candidates"]:
        if c.get("error"):
            verdict = escape(c["error"])
        elif c.get("passed"):
            verdict = "[green]exact[/green]" if c.get("exact") else "[green]verified[/green]"
        else:
            verdict = "[red]rejected: logits disagree[/red]"
        t.add_row(escape(c["name"]),
                  "-" if c.get("tokens_per_s") is None else f"{c['tokens_per_s']:,.1f}",
                  _x(c.get("speedup")),
                  "-" if c.get("prep_s") is None else fmt_s(c["prep_s"]),
                  "-" if c.get("top1_agreement") is None else f"{c['top1_agreement']:.0%}",
                  "-" if c.get("rel_err") is None else f"{c['rel_err']:.1e}", verdict)
    print_table(out, t)
    out.print(f"[bold]{escape(d['conclusion'])}[/bold]")
    for c in d["candidates"]:
        if c.get("note"):
            out.print(f"[dim]note: {escape(c['name'])}: {escape(c['note'])}[/dim]")
    for note in d.get("notes", []):
        out.print(f"[dim]note: {escape(note)}[/dim]")


def memory_line(m: dict[str, Any]) -> str:
    """One line of a report's `memory`: the peak and its largest categories."""
    from gobrrr.memory import CATEGORIES

    parts = sorted(((name, m.get(f"{name}_bytes", 0)) for name in CATEGORIES.values()),
                   key=lambda kv: -kv[1])
    shown = ", ".join(f"{name.replace('_', ' ')} {fmt_num(v, 'B')}" for name, v in parts
                      if v > 0)
    alloc = m.get("allocator") or {}
    extra = (f"; the allocator's peak {fmt_num(alloc['max_allocated_bytes'], 'B')}"
             if alloc.get("max_allocated_bytes") else "")
    return (f"memory: one step's peak {fmt_num(m['peak_bytes'], 'B')} of live tensors "
            f"({shown}){extra} [dim](gobrrr memory: by module, and the batch that fits "
            "with --fit)[/dim]")


def print_memory(d: dict[str, Any]) -> None:
    """`gobrrr memory`'s result (gobrrr.memory.MemoryProfile's dict and the workload)."""
    from rich.markup import escape
    from rich.table import Table

    from gobrrr.memory import CATEGORIES

    out = console()
    w = d["workload"]
    peak = d["peak_bytes"]
    out.print(f"[bold]gobrrr memory[/bold]  {escape(w['name'])} (batch {w.get('batch_size')})"
              f" on {d['device']}: peak {fmt_num(peak, 'B')} of live tensors in one step")
    t = Table(title="at the peak", title_justify="left", show_edge=False)
    t.add_column("category")
    t.add_column("bytes", justify="right")
    t.add_column("share", justify="right")
    for name in CATEGORIES.values():
        b = d[f"{name}_bytes"]
        if b:
            t.add_row(name.replace("_", " "), fmt_num(b, "B"),
                      f"{100 * b / peak:.0f}%" if peak else "-")
    print_table(out, t)
    mods = [m for m in d["modules"] if m.get("activations_bytes")]
    if mods:
        mt = Table(title="activations alive after each module's forward", title_justify="left",
                   show_edge=False)
        for col in ("module", "type", "activations", "forward peak", "backward peak"):
            mt.add_column(col, justify="left" if col in ("module", "type") else "right")
        for m in mods[:12]:
            mt.add_row(escape(m["module"]), m["type"], fmt_num(m["activations_bytes"], "B"),
                       fmt_num(m["forward_peak_bytes"] or 0, "B"),
                       fmt_num(m["backward_peak_bytes"] or 0, "B")
                       if m.get("backward_peak_bytes") else "-")
        print_table(out, mt)
    if d.get("allocator"):
        a = d["allocator"]
        out.print(f"CUDA allocator: max allocated {fmt_num(a['max_allocated_bytes'], 'B')}, "
                  f"max reserved {fmt_num(a['max_reserved_bytes'], 'B')}")
    fit = d.get("fit")
    if fit:
        pred = fit["predicted_max_batch"]
        out.print(f"batch {fit['batches'][0]} -> {fit['batches'][1]}: peak "
                  f"{fmt_num(fit['peaks_bytes'][0], 'B')} -> "
                  f"{fmt_num(fit['peaks_bytes'][1], 'B')}: "
                  f"{fmt_num(fit['fixed_bytes'], 'B')} + {fmt_num(fit['per_sample_bytes'], 'B')}"
                  " per sample")
        if pred is not None:
            out.print(f"[bold]largest batch predicted to fit: {pred}[/bold] "
                      f"(capacity {escape(fit['capacity_source'])})")
        for key, c in (fit.get("checked") or {}).items():
            if key == "largest_ran":
                lo, hi = c["between"]
                out.print(f"  [bold]largest batch that ran: {c['batch']}[/bold] (bisected "
                          f"in {c['runs']} runs; {hi} ran out of memory"
                          + (f"; stopped: {escape(c['stopped'])}" if c.get("stopped") else "")
                          + (f"; {hi - lo - 1} batches between untried" if hi - lo > 1
                             else "") + ")")
                continue
            what = ("ran" if c["ran"] else
                    "out of memory" if c.get("oom") else f"failed: {c.get('error')}")
            out.print(f"  checked batch {c['batch']} ({key.replace('_', ' ')}): {escape(what)}")
        for note in fit.get("notes", []):
            out.print(f"[dim]note: {escape(note)}[/dim]")
        if fit.get("throughput"):
            print_throughput(out, fit["throughput"])
    seq = d.get("fit_seq_len")  # memory --fit-seq-len (memory_seq.py)
    if seq:
        out.print("peak by sequence length: " + " · ".join(
            f"{n}: {fmt_num(p, 'B')}" for n, p in zip(seq["seq_lens"], seq["peaks_bytes"],
                                                     strict=True)))
        if seq["predicted_max_seq_len"] is not None:
            out.print(f"[bold]longest sequence predicted to fit: "
                      f"{seq['predicted_max_seq_len']}[/bold] (bounded by "
                      f"{seq['limited_by']}; capacity {escape(seq['capacity_source'])})")
        for key, c in (seq.get("checked") or {}).items():
            if key == "largest_ran":
                out.print(f"  [bold]longest that ran: {c['seq_len']}[/bold] (bisected in "
                          f"{c['runs']} runs)")
                continue
            what = ("ran" if c["ran"] else
                    "out of memory" if c.get("oom") else f"failed: {c.get('error')}")
            out.print(f"  checked length {c['seq_len']} ({key.replace('_', ' ')}): "
                      f"{escape(what)}")
        for note in seq.get("notes", []):
            out.print(f"[dim]note: {escape(note)}[/dim]")
    if d.get("remedies") is not None:  # memory --remedies (memory_remedies.py)
        print_memory_remedies(out, d["remedies"], d.get("remedies_notes", []))
    for note in d.get("notes", []):
        out.print(f"[dim]note: {escape(note)}[/dim]")


def print_throughput(out: Any, tp: dict[str, Any]) -> None:
    """`gobrrr memory --fit --throughput`: the step's time and samples/s at each batch of
    the ladder (memory_throughput.Throughput's dict), the gain at the batch that fits
    and the knee, as measured."""
    from rich.markup import escape
    from rich.table import Table

    rungs = tp["rungs"]
    base = rungs[0] if rungs and rungs[0].get("samples_per_s") else None
    t = Table(title=f"what a larger batch buys (gobrrr's timer, {tp['where']})",
              title_justify="left", show_edge=False)
    for col in ("batch", "step", "samples/s", f"vs batch {rungs[0]['batch']}" if rungs
                else "vs today", "spread"):
        t.add_column(col, justify="right")
    for r in rungs:
        sps = r.get("samples_per_s")
        if sps is None:
            t.add_row(str(r["batch"]), "out of memory" if r.get("oom") else "failed",
                      "-", "-", "-")
            continue
        t.add_row(str(r["batch"]), fmt_s(r["step_s"]), fmt_num(sps),
                  f"{sps / base['samples_per_s']:.2f}x" if base else "-",
                  "-" if r.get("rel_iqr") is None else
                  f"{100 * r['rel_iqr']:.0f}%" + (" (noisy)" if r.get("noisy") else ""))
    print_table(out, t)
    top, today = tp.get("fit_batch"), rungs[0]["batch"] if rungs else None
    if tp.get("gain_at_fit") is not None:
        out.print(f"[bold]batch {top} (the batch that fits, {escape(tp['fit_source'])}) runs "
                  f"{tp['gain_at_fit']:.2f}x the samples/s of batch {today}[/bold]")
    elif tp.get("gain_at_largest_timed") is not None and tp["largest_timed_batch"] != today:
        out.print(f"batch {tp['largest_timed_batch']} (the largest timed; the batch that "
                  f"fits: {top or '-'}) runs {tp['gain_at_largest_timed']:.2f}x the "
                  f"samples/s of batch {today}")
    pct = round(100 * (tp["knee_gain"] - 1))
    if tp.get("knee_batch") is not None:
        out.print(f"[bold]from batch {tp['knee_batch']} a doubling buys under {pct}% more "
                  "samples/s[/bold] (the step has turned compute- or bandwidth-bound there)")
    elif tp.get("doublings_timed"):
        out.print(f"each of the {tp['doublings_timed']} doublings timed, up to batch "
                  f"{tp['largest_timed_batch']}, bought "
                  f"{pct}% or more samples/s (no knee: still short of compute- or "
                  "bandwidth-bound)")
    for note in tp.get("notes", []):
        out.print(f"[dim]note: {escape(note)}[/dim]")


def print_memory_remedies(out: Any, rows: list[dict[str, Any]], notes: list[str]) -> None:
    """`gobrrr memory --remedies`: each remedy's peak and step time, before and after,
    as measured (the rows are memory_remedies.MemoryRemedyResult dicts)."""
    from rich.markup import escape
    from rich.table import Table

    t = Table(title="what the memory buys (each remedy on a copy, against the plain step)",
              title_justify="left", show_edge=False)
    for col in ("remedy", "status", "peak before", "peak after", "saved", "step before",
                "step after", "time cost"):
        t.add_column(col, justify="left" if col in ("remedy", "status") else "right")

    def b(v: Any) -> str:
        return fmt_num(v, "B") if v is not None else "-"

    def s(v: Any) -> str:
        return fmt_s(v) if v is not None else "-"

    for r in rows:
        if r["status"] == "not applicable":
            continue
        saved = r.get("bytes_saved")
        cost = r.get("time_cost")
        t.add_row(r["name"], r["status"], b(r.get("peak_bytes_before")),
                  b(r.get("peak_bytes_after")),
                  "-" if saved is None else (f"-{fmt_num(-saved, 'B')}" if saved < 0
                                             else fmt_num(saved, "B")),
                  s(r.get("step_s_before")), s(r.get("step_s_after")),
                  "-" if cost is None else f"{cost:.2f}x")
    print_table(out, t)
    for r in rows:
        src = f" [dim]({escape(r['peak_source'])} peak)[/dim]" if r.get("peak_source") else ""
        out.print(f"  {escape(r['name'])}: {escape(r['reason'])}{src}")
        for note in r.get("notes", []):
            out.print(f"[dim]    {escape(note)}[/dim]")
    for note in notes:
        out.print(f"[dim]note: {escape(note)}[/dim]")


def prediction_record_lines(record: list[dict[str, Any]]) -> list[str]:
    """How far the predictions of each kind among the measured candidates have been off
    (remedies/prediction_record.py), in words: this run, the validation suite, this
    machine's earlier runs."""
    if not record:
        return []
    from gobrrr.remedies.prediction_record import ErrorSummary

    suite = "" if any(k.get("validation") for k in record) else (
        "; no validation suite for this device")
    out = [f"How far the predictions have been off (measured / predicted speedup{suite}):"]
    for k in record:
        parts = [f"this run {ErrorSummary(**k['this_run']).text()}"]
        if k.get("validation"):
            parts.append(f"{k['validation_source']}: "
                         f"{ErrorSummary(**k['validation']).text()}")
        if k.get("this_machine"):
            parts.append(f"this machine's earlier runs: "
                         f"{ErrorSummary(**k['this_machine']).text()}")
        out.append(f"  {k['kind']}: " + "; ".join(parts))
    return out


def print_optimize(res: OptimizeResult) -> None:
    """The ranked table, each remedy's reason, the winner and its code (stdout)."""
    from rich.markup import escape
    from rich.table import Table

    out = console()
    w = res.workload
    title = (f"optimize {w['name']} on {w['device']}" +
             (f" (batch {w['batch_size']})" if w.get("batch_size") else "") +
             (f", diagnosed {res.regime}-bound" if res.regime else ""))
    table = Table(title=title, title_justify="left", pad_edge=False)
    table.add_column("remedy")
    table.add_column("status")
    table.add_column("pred.", justify="right")
    table.add_column("meas.", justify="right")
    table.add_column("95% int.", justify="right")
    table.add_column("prep s", justify="right")
    rows = sorted(res.remedies, key=lambda r: (_STATUS_RANK.get(r.status, 9),
                                               -(r.measured_speedup or 0)))
    for r in rows:
        style = _STATUS_STYLE.get(r.status, "")
        iv = f"{r.interval[0]:.2f}-{r.interval[1]:.2f}" if r.interval else "-"
        status = "no sig. change" if r.status == "no significant change" else r.status
        table.add_row(escape(r.name), f"[{style}]{status}[/]" if style else status,
                      _x(r.predicted_speedup), _x(r.measured_speedup), iv,
                      "-" if r.compile_s is None else f"{r.compile_s:.1f}")
    print_table(out, table)
    for r in rows:
        if r.reason:
            out.print(f"  [bold]{escape(r.name)}[/]: {escape(r.reason)}")
        breaks = r.checks.get("graph_breaks")
        if breaks:
            out.print(f"    {breaks} graph break(s): "
                      f"{escape('; '.join(r.checks.get('break_reasons', [])))}")
    for line in prediction_record_lines(res.prediction_record):
        out.print(escape(line))
    best = res.best
    if best is None:
        out.print(f"\n[bold]Best:[/] eager as it is: {escape(res.conclusion)}.")
    else:
        pred = f", predicted {_x(best.predicted_speedup)}" if best.predicted_speedup else ""
        out.print(f"\n[bold]Best:[/] {escape(best.name)}: {_x(best.measured_speedup)} "
                  f"measured{pred}; outputs verified ({escape(best.tolerance)}).")
    unverifiable = sum(r.status == "unverifiable" for r in rows)
    if unverifiable:
        out.print(f"[magenta]{unverifiable} unverifiable[/]: outputs that could not be "
                  "judged against eager's (see the reasons); timed, never chosen.")
    if best is not None:  # code, printed whole (without a winner, "Best:" says it all)
        out.print(escape(res.snippet), soft_wrap=True)
    for note in res.notes:
        out.print(f"[dim]note: {escape(note)}[/dim]")
    if res.budget_s:
        setup = (f"imports and the workload's build {res.setup_s:.1f} s, "
                 if res.setup_s else "")
        out.print(f"[dim]{res.setup_s + res.optimize_s:.1f} s of --budget-s "
                  f"{res.budget_s:g} ({setup}diagnosis {res.diagnose_s:.1f} s)[/dim]")


def print_comparison(c: Comparison) -> None:
    from rich.markup import escape
    from rich.table import Table

    from gobrrr.compare import REGIMES
    from gobrrr.units import fmt_pct

    out = console()
    word = "slower" if c.change > 0 else "faster" if c.change < 0 else "(no change)"
    style = "red" if c.regressed else "green" if c.change < 0 and c.significant else "default"
    out.print(f"[bold]gobrrr compare[/bold]  {escape(c.old_name)} -> {escape(c.new_name)}")
    spread = f" ({c.interval_text})" if c.interval_text else " (no interval)"
    out.print(f"T_wall {fmt_s(c.old_wall_s)} -> {fmt_s(c.new_wall_s)}: "
              f"[{style}]{100 * abs(c.change):.1f}% {word}[/]" + spread)
    for w in c.work:
        ch = w.change
        grew = ch is not None and ch > c.fail_above
        text = ("not gated (one side's reports differ)" if ch is None else
                f"{w.old:,} -> {w.new:,} ({fmt_change(ch)})")
        out.print(f"{w.name}: " + (f"[red]{text}[/red]" if grew else text))
    if c.change_low is None:
        why = "time on the medians alone"
    elif c.time_regressed:
        why = f"slower by at least {100 * c.change_low:.1f}%"
    elif not c.significant:
        why = "not a significant change in time"
    elif c.change_low < 0:
        why = "significantly faster"
    else:
        why = f"significantly slower, by at least {100 * c.change_low:.1f}%"
    if c.work_regressed:
        why = "more " + ", ".join(w.name for w in c.work_regressed) + "; " + why
    basis = (f"runs: {len(c.old_runs_s)}, {len(c.new_runs_s)}" if c.basis == "runs"
             else f"one run a side, time limit +{100 * c.time_limit:g}%; samples: "
                  f"{c.old_n}, {c.new_n}")
    verdict = "[red]FAIL[/red]" if c.regressed else "[green]pass[/green]"
    out.print(f"gate --fail-above {100 * c.fail_above:g}%: {verdict}: {why} "
              f"[dim]({basis})[/dim]")
    t = Table(title="regime split", title_justify="left")
    t.add_column("regime")
    t.add_column("old", justify="right")
    t.add_column("new", justify="right")
    t.add_column("change", justify="right")
    for r in REGIMES:
        a, b = c.old_fractions[r], c.new_fractions[r]
        t.add_row(r + (" *" if r == c.new_regime else ""), fmt_pct(a), fmt_pct(b),
                  f"{100 * (b - a):+.0f} pts")
    print_table(out, t)
    if c.old_regime != c.new_regime:
        out.print(f"regime changed: {c.old_regime}-bound -> {c.new_regime}-bound")
    t = Table(title="top ops", title_justify="left")
    for col, just in (("op", "left"), ("old", "right"), ("new", "right"),
                      ("new/old", "right"), ("bound", "left")):
        t.add_column(col, justify=just)  # type: ignore[arg-type]
    for o in c.ops:
        bound = (o.new_bound or o.old_bound or "-") if o.old_bound == o.new_bound or \
            None in (o.old_bound, o.new_bound) else f"{o.old_bound} -> {o.new_bound}"
        t.add_row(escape(o.name), fmt_s(o.old_s), fmt_s(o.new_s),
                  f"{o.ratio:.2f}x" if o.ratio is not None else
                  "new" if o.old_s is None else "gone" if o.new_s is None else "-", bound)
    print_table(out, t)
    for note in c.notes:
        out.print(f"[yellow]note:[/yellow] {escape(note)}")


def print_lab(report: LabReport) -> None:
    from rich.markup import escape
    from rich.table import Table

    out = console()
    fp = report.fingerprint
    out.print(f"[bold]gobrrr lab[/bold] on {fp.get('name', report.device)} ({report.device}), "
              f"torch {fp.get('torch')}{', --quick' if report.quick else ''}")
    for r in report.results:
        out.rule(f"{r.name}: {r.title}")
        cols, rows = r.table()
        t = Table(show_edge=False)
        for c in cols:
            t.add_column(c)
        for row in rows:
            t.add_row(*map(escape, row))
        print_table(out, t)
        e = Table(title="essay (A100)", title_justify="left", show_edge=False)
        e.add_column("claim")
        e.add_column("essay")
        for ref in r.essay:
            e.add_row(escape(ref.what), escape(ref.essay))
        print_table(out, e)
        mark = {True: "[green]agrees[/green]", False: "[red]differs[/red]",
                None: "[dim]n/a[/dim]"}[r.agrees_with_essay]
        out.print(f"[bold]conclusion[/bold] ({mark}): {escape(r.conclusion)}")
        for note in r.notes:
            out.print(f"[dim]note: {escape(note)}[/dim]")
        out.print(f"[dim]{fmt_s(r.elapsed_s)}[/dim]")
    for name, err in report.errors.items():
        out.print(f"[red]{name} failed:[/red] {escape(err)}")
    out.print(f"[dim]lab wall time {fmt_s(report.wall_s)}[/dim]")
