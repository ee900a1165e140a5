"""The doctor report as HTML, built from `Report.to_dict()` (so a saved --json file
renders the same page as a live Report).

Order is what a reader needs first: the verdict and its evidence, the time budget, the
roofline, the experiments, then the tables, remedies, notes, and the machine.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

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
)
from gobrrr.show.figures import (
    batch_scaling_svg,
    budget_bar_svg,
    decode_batch_svg,
    plottable_rows,
    roofline_svg,
    step_series_svg,
)
from gobrrr.show.page import Section, environment, figure, paragraph, render_page, table
from gobrrr.units import fmt_num, fmt_s

__all__ = ["report_sections", "render_report", "write_report", "rows_table", "title_of"]

def rows_table(rows: list[dict[str, Any]], total_s: float, numbered: bool = False,
               count: str = "calls") -> Any:
    """Per-op / per-module / per-class rows (budget.RowBudget dicts), sortable; `count`
    heads the calls column (OP_CALLS where a row groups several ops)."""
    cols = (["#"] if numbered else []) + [
        "name", count, "time", "% of T", "FLOPs", "bytes", "FLOP/B", "achieved",
        "% roofline", "bound"]
    out = []
    for i, r in enumerate(rows):
        ach = (r["achieved_flops_per_s"] if r["bound"] == "compute"
               else r["achieved_bytes_per_s"])
        ach_txt = (fmt_num(r["achieved_flops_per_s"], "FLOP/s") if r["bound"] == "compute"
                   else fmt_num(r["achieved_bytes_per_s"], "B/s"))
        frac = r["roofline_fraction"]
        cells: list[Any] = [(str(i + 1), i + 1)] if numbered else []
        cells += [
            r["name"], (str(r["calls"]), r["calls"]), (fmt_s(r["time_s"]), r["time_s"]),
            (f"{100 * r['time_s'] / total_s:.1f}%" if total_s > 0 else "-", r["time_s"]),
            (fmt_num(r["flops"]), r["flops"]), (fmt_num(r["bytes"], "B"), r["bytes"]),
            (f"{r['intensity_flops_per_byte']:.3g}"
             if r["intensity_flops_per_byte"] is not None else "-",
             r["intensity_flops_per_byte"] if r["intensity_flops_per_byte"] is not None
             else -1),
            (ach_txt, ach if ach is not None else -1),
            (f"{100 * frac:.0f}%" + _band_mark(r) if frac is not None else "-",
             frac if frac is not None else -1),
            _bound_text(r),
        ]
        out.append(cells)
    name_col = 1 if numbered else 0
    return table(cols, out, text_columns=(name_col, len(cols) - 1), name_columns=(name_col,))


def _band_mark(r: dict[str, Any]) -> str:
    """" (below)" under 25% of its roofline, " (25-50%)" from there to 50%, " (above
    roof)" over 100% (budget_view.above_roof: faster than the measured ceilings)."""
    if above_roof(r):
        return " (above roof)"
    return {"<25%": " (below)", "25-50%": " (25-50%)"}.get(roof_band(r) or "", "")


def _bound_text(r: dict[str, Any]) -> str:
    return "compute (instruction)" if r.get("limit") == "instruction" else r["bound"]


def _phases_body(rows: list[dict[str, Any]], total_s: float) -> Any:
    """The per-phase rows with what a phase is: a step that mixes regimes, read apart."""
    from markupsafe import Markup

    return Markup("").join([
        paragraph("Each phase's op time and its own bound: forward, backward and optimizer "
                  "(from autograd and the optimizer's step), compiled code, or the name of "
                  "a torch.profiler.record_function range. Time between ops (Python, "
                  "dispatch) is in no phase: the phases add up to the ops' time, not to "
                  "T.", "note"),
        rows_table(rows, total_s, count=OP_CALLS)])


def _step_body(d: dict[str, Any]) -> Any:
    """The step as the script ran it: its phases (seconds and share, summing to T_wall)
    and, for a script, every step's time in order."""
    from markupsafe import Markup

    out = [paragraph("One step's wall time by phase: each op phase's busy time, the wait "
                     "for the next batch with the device idle (data loading), and the "
                     "rest of the step's host time.", "note"),
           table(["phase", "time", "share of the step", "measured as"],
                 [(name, (fmt_s(p["seconds"]), p["seconds"]),
                   (f"{100 * p['share']:.1f}%", p["share"]), p.get("source", ""))
                  for name, p in d["phases"].items()], text_columns=(0, 3))]
    series = (d.get("steps") or {}).get("series")
    svg = step_series_svg(series) if series else None
    if svg:
        out.append(figure(svg, "Every step's time in the order the script ran them: the "
                               "warm-up (run as it is), the timed steps (T_wall is their "
                               "mean), the profiled ones (slower: the profiler's cost)."))
    return Markup("").join(out)


def _generation_body(g: dict[str, Any]) -> Any:
    """A generation's two phases (report `generation`): prefill against the compute peak,
    decode against its bandwidth bound."""
    pre, dec = g["prefill"], g["decode"]

    def pct(x: float | None) -> Any:
        return ("-", -1.0) if x is None else (f"{100 * x:.1f}%", x)

    rows = [("prefill", (fmt_s(pre["seconds"]), pre["seconds"]),
             (f"{pre['tokens_per_s']:,.0f}" if pre.get("tokens_per_s") else "-",
              pre.get("tokens_per_s") or 0.0),
             "-", pct(pre.get("mfu")), "FLOPs of one prompt forward over the compute peak"),
            ("decode (median step)", (fmt_s(dec["median_step_s"]), dec["median_step_s"]),
             (f"{dec['tokens_per_s']:,.1f}", dec["tokens_per_s"]),
             (f"{dec['bound_tokens_per_s']:,.0f}" if dec.get("bound_tokens_per_s") else "-",
              dec.get("bound_tokens_per_s") or 0.0), pct(dec.get("mbu")),
             f"{fmt_num(dec['step_bytes'], 'B')} a step (weights, embedding rows, the KV "
             f"cache from {dec.get('kv_source', '?')}) over the measured bandwidth")]
    from markupsafe import Markup

    return Markup("").join([
        paragraph(f"{g['new_tokens']} new tokens after {g['batch']} x {g['prompt_len']} "
                  f"prompt tokens, greedy; prefill is "
                  f"{100 * g.get('share_prefill', 0):.0f}% of the time. The budget below "
                  f"is one profiled generation of {g.get('profiled_new_tokens', '?')} "
                  "tokens.", "note"),
        table(["phase", "time", "tokens/s", "bound tokens/s", "of the limit", "limit"],
              rows, text_columns=(0, 5)), *_decode_batch_parts(g.get("batch_scaling")),
        *([paragraph(g["decode_graph"]["summary"], "note")] if g.get("decode_graph") else [])])


def _decode_batch_parts(bs: dict[str, Any] | None) -> list[Any]:
    """The decode batch experiment (report 1.9): its figure and its stopping reason."""
    if not bs or not bs.get("points"):
        return []
    svg = decode_batch_svg(bs)
    return [paragraph(f"Decode at batch {', '.join(str(p['batch']) for p in bs['points'])} "
                      f"(the prompt repeated, {bs['new_tokens']} tokens each): "
                      f"{bs['stopped']}.", "note"),
            *([figure(svg, "Decode tokens/s against batch, with the bandwidth limit (all "
                           "weights and the KV cache read each step) and the compute "
                           "limit (the peak over FLOPs per token) at each batch")]
              if svg else [])]


def _below_roof_table(d: dict[str, Any], total_s: float) -> Any:
    """Ops whose time their roofline does not explain: instruction-bound, or under 50% of
    their roofline, each with its reason (instruction) or likely cause (budget.py)."""
    rows = [r for r in d["budget"]["per_op"]
            if r.get("limit") == "instruction" or r.get("roof_band")]
    if not rows:
        return paragraph("No op is instruction-bound or under 50% of its own roofline.",
                         "note")
    out = []
    for r in rows:
        frac = r["roofline_fraction"]
        out.append([r["name"], (fmt_s(r["time_s"]), r["time_s"]),
                    (f"{100 * r['time_s'] / total_s:.1f}%" if total_s > 0 else "-",
                     r["time_s"]),
                    (f"{100 * frac:.0f}%" if frac is not None else "-",
                     frac if frac is not None else -1),
                    r.get("roof_band") or "-", _bound_text(r), cause_text(r)])
    rows_html = table(["op", "time", "% of T", "% roofline", "band", "bound", "why"], out,
                      text_columns=(0, 4, 5, 6), name_columns=(0,))
    if not any(cause_text(r).startswith(UNEXPLAINED) for r in rows):
        return rows_html
    from markupsafe import Markup

    return Markup("").join([rows_html, paragraph(UNEXPLAINED_NOTE, "note")])


# The catalog remedies (a remedy's "spec" key) that an experiment of the diagnosis
# already ran: the graph replay is CUDA graphs; the batch-size advice is read off the
# batch-scaling measurement itself.
_MEASURED_BY_EXPERIMENT = {"cuda_graphs": "graph_replay", "batch_size": "batch_scaling"}


def _measured_gain(rem: dict[str, Any], d: dict[str, Any]) -> tuple[float | None, str]:
    """A remedy's measured whole-workload gain and what measured it: `gobrrr optimize`
    fills measured_speedup; without it, an experiment that already ran the remedy."""
    if rem.get("measured_speedup"):
        return rem["measured_speedup"], rem.get("measured_by", "gobrrr optimize")
    experiment = _MEASURED_BY_EXPERIMENT.get(rem.get("spec") or "")
    got = d["experiments"].get(experiment) or {} if experiment else {}
    if experiment == "graph_replay" and got.get("speedup"):
        return got["speedup"], "graph-replay experiment"
    if experiment == "batch_scaling" and rem.get("predicted_speedup"):
        return rem["predicted_speedup"], "batch-scaling experiment"
    return None, "not yet (gobrrr optimize measures it)"


def _remedies_table(d: dict[str, Any]) -> Any:
    rows = []
    for rem in d["remedies"]:
        pred = rem.get("predicted_speedup")
        meas, by = _measured_gain(rem, d)
        rows.append([rem["name"], rem["regime"],
                     (f"{pred:.2f}x" if pred else "-", pred or 0),
                     (f"{meas:.2f}x" if meas else "-", meas or 0), by,
                     rem["basis"], rem["how"]])
    return table(["remedy", "for", "predicted", "measured", "measured by", "why", "how"],
                 rows, text_columns=(0, 1, 4, 5, 6))


def _stack_table(d: dict[str, Any]) -> Any:
    m = d["machine"]
    fp = m["fingerprint"]
    rows = [["device", f"{fp.get('name', m['device'])} ({m['device']})"]]
    for key, label in (("capability", "compute capability"), ("cuda_driver", "CUDA driver"),
                       ("cuda_runtime", "CUDA runtime"), ("machine", "architecture"),
                       ("threads", "torch threads"), ("torch", "torch"),
                       ("python", "python")):
        if fp.get(key):
            rows.append([label, str(fp[key])])
    rows += [["gobrrr", f"{d['gobrrr_version']} (report schema {d['schema_version']})"],
             ["report created", d["created"]]]
    return table(["", ""], rows, sortable=False, text_columns=(0, 1))


def _ceilings_table(m: dict[str, Any]) -> Any:
    sheet = m.get("datasheet") or {}
    rows = []
    for dtype, v in m["peak_flops_per_s"].items():
        s = (sheet.get("peak_flops_per_s") or {}).get(dtype)
        rows.append([f"matmul {dtype}", fmt_num(v, "FLOP/s"),
                     fmt_num(s, "FLOP/s") if s else "-", f"{100 * v / s:.0f}%" if s else "-"])
    bw, sbw = m["bandwidth_bytes_per_s"], sheet.get("bandwidth_bytes_per_s")
    kernel = m.get("bandwidth_kernel")
    rows.append([f"bandwidth ({kernel}, bytes it moves)" if kernel else "bandwidth",
                 fmt_num(bw, "B/s"),
                 fmt_num(sbw, "B/s") if sbw else "-", f"{100 * bw / sbw:.0f}%" if sbw else "-"])
    rows.append(["eager cost of one tiny op", fmt_s(m["op_overhead_s"]), "-", "-"])
    if m.get("compiled_call_s") is not None and m.get("compiled_tensor_s") is not None:
        rows.append(["a compiled call's host cost", f"{fmt_s(m['compiled_call_s'])} + "
                     f"{fmt_s(m['compiled_tensor_s'])} per tensor", "-", "-"])
    from gobrrr.hardware import MATH_KINDS, Ceilings

    ceil = Ceilings.from_dict(m)  # its bytes/s per probe, as `gobrrr calibrate` shows
    row_len = ceil.details.get("math_row")
    for kind in MATH_KINDS:
        for dtype in (m.get(f"{kind}_elems_per_s") or {}):
            rate, bps = ceil.math_elems_per_s(kind, dtype), ceil.math_bytes_per_s(kind, dtype)
            moved = (f", {fmt_num(bps, 'B/s')} = {100 * bps / bw:.0f}% of the bandwidth"
                     if bps else "")
            what = f"softmax (rows of {row_len})" if kind == "softmax" and row_len else kind
            rows.append([f"{what} {dtype}", fmt_num(rate, "elem/s") + moved, "-", "-"])
    return table(["ceiling", "measured here", "datasheet", "% of datasheet"], rows,
                 sortable=False)


def _pct(x: float | None) -> tuple[str, float]:
    return ("-", -1.0) if x is None else (f"{100 * x:.1f}%", x)


def _distributed_body(dd: dict[str, Any]) -> Any:
    """The distributed section (report schema 1.4+): every number read from `dd`."""
    from markupsafe import Markup

    from gobrrr.show.dist_figures import projection_svg, rank_split_svg

    parts: list[Any] = []
    ranks = dd["ranks"]
    parts.append(figure(rank_split_svg(ranks), "Each rank's step split into the four "
                        "regimes (shares of its own T_wall)."))
    rows = []
    for r in ranks:
        f = r["fractions"]
        rows.append([
            (str(r["rank"]), r["rank"]), (fmt_s(r["wall_s"]), r["wall_s"]),
            *(_pct(f.get(k)) for k in ("overhead", "memory", "compute", "communication")),
            (fmt_s(r["exposed_transfer_s"]), r["exposed_transfer_s"]),
            (fmt_s(r["exposed_waiting_s"]) + f" ({r.get('waiting_source', 'profiled steps')})",
             r["exposed_waiting_s"]),
            (fmt_s(r.get("exposed_waiting_profiled_s", r["exposed_waiting_s"])),
             r.get("exposed_waiting_profiled_s", r["exposed_waiting_s"])),
            (fmt_s(r.get("ddp_bucket_copy_s", 0.0)), r.get("ddp_bucket_copy_s", 0.0)),
            (fmt_s(r.get("communication_total_s", 0.0)), r.get("communication_total_s", 0.0)),
        ])
    parts.append(table(["rank", "T_wall", "overhead", "memory", "compute", "communication",
                        "exposed transfer", "waiting (used)", "waiting (profiled)",
                        "DDP bucket copies", "all collective time"], rows))
    if dd["stragglers"]:
        for s in dd["stragglers"]:
            parts.append(paragraph(
                f"Straggler: rank {s['rank']} makes each peer wait {fmt_s(s['peer_waiting_s'])}"
                f" per step ({100 * s['share_of_step']:.0f}% of the step; last to arrive in "
                f"{s.get('late_in', '?')} of {s.get('collectives', '?')} collectives)."))
    else:
        parts.append(paragraph(f"No straggler (threshold: "
                               f"{100 * dd.get('straggler_threshold', 0.1):.0f}% of the step "
                               "for each peer).", "note"))
    cmp_rows = []
    for r in ranks:
        c = r.get("no_sync_comparison")
        if c:
            cmp_rows.append([(str(r["rank"]), r["rank"]), _pct(c["exposed_fraction"]),
                             _pct(c["with_bucket_copies_fraction"]),
                             _pct(c["bound_fraction"]), c["explanation"]])
    if cmp_rows:
        parts.append(Markup("<h3>Against the no_sync bound</h3>"))
        parts.append(table(["rank", "exposed communication (gobrrr)",
                            "+ DDP bucket copies", "no_sync bound", "the gap"], cmp_rows,
                           text_columns=(4,)))
        if dd.get("no_sync_gap"):
            parts.append(paragraph(dd["no_sync_gap"], "note"))
    coll_rows = []
    for c in dd["collectives"]:
        coll_rows.append([
            c["collective"], (fmt_num(c["bytes"], "B") if c["bytes"] else "-",
                              c["bytes"] or -1),
            (f"{c['calls_per_step']:g}", c["calls_per_step"]),
            (fmt_s(c["transfer_us_median"] * 1e-6), c["transfer_us_median"]),
            (f"{c['busbw_gbps']:.1f} GB/s" if c["busbw_gbps"] is not None else "-",
             c["busbw_gbps"] if c["busbw_gbps"] is not None else -1),
            (f"{c['ceiling_busbw_gbps']:.1f} GB/s" if c.get("ceiling_busbw_gbps") else "-",
             c.get("ceiling_busbw_gbps") or -1),
            _pct(c["pct_of_ceiling"])])
    parts.append(Markup("<h3>Collectives</h3>"))
    parts.append(table(["collective", "size", "per step", "transfer (median)",
                        "achieved busbw", "calibrated busbw at this size", "% of ceiling"],
                       coll_rows))
    if dd.get("ceilings_source"):
        parts.append(paragraph(f"Ceilings: {dd['ceilings_source']}.", "note"))
    topo = dd.get("topology")
    if topo:
        env = ", ".join(f"{k}={v}" for k, v in (topo.get("nccl_env") or {}).items()) or "none"
        names = ", ".join(topo.get("gpu_names") or []) or topo.get("cpu_name", "CPU")
        parts.append(Markup("<h3>Topology</h3>"))
        parts.append(paragraph(
            f"{topo.get('gpu_count', 0)} GPU(s): {names}; links {topo.get('link_type')}"
            f" ({topo.get('nvlinks', 0)} NVLinks, from {topo.get('link_source')}); NCCL "
            f"{topo.get('nccl_version')}; NCCL environment: {env}; world "
            f"{topo.get('world_size')}, backend {topo.get('backend')}."))
    proj = dd.get("projection")
    if proj:
        parts.append(Markup("<h3>Projection beyond this host</h3>"))
        parts.append(figure(projection_svg(proj),
                            f"Intra-node bandwidth: {dd.get('projection_bandwidth')}. "
                            + proj["conclusion"]))
        parts.append(table(
            ["GPUs", "nodes", "DDP comm", "DDP step", "DDP eff.", "FSDP comm", "FSDP step",
             "FSDP eff."],
            [[(str(r["n_gpus"]), r["n_gpus"]), (str(r["nodes"]), r["nodes"]),
              (fmt_s(r["ddp_comm_s"]), r["ddp_comm_s"]),
              (fmt_s(r["ddp_step_s"]), r["ddp_step_s"]), _pct(r["ddp_efficiency"]),
              (fmt_s(r["fsdp_comm_s"]), r["fsdp_comm_s"]),
              (fmt_s(r["fsdp_step_s"]), r["fsdp_step_s"]), _pct(r["fsdp_efficiency"])]
             for r in proj["rows"]]))
        chk = dd.get("projection_check")
        if chk:
            parts.append(paragraph(
                f"Check: {chk['n_gpus']} GPUs projected {fmt_s(chk['projected_step_s'])}, "
                f"measured {fmt_s(chk['measured_step_s'])} "
                f"({100 * chk['rel_error']:+.0f}%).", "note"))
    for n in dd.get("notes", []):
        parts.append(paragraph(n, "note"))
    return Markup("").join(parts)


def title_of(d: dict[str, Any]) -> tuple[str, str]:
    w, fp = d["workload"], d["machine"]["fingerprint"]
    if w.get("source") == "script":  # gobrrr run: the user's script in place
        return (f"gobrrr run: {w['name']}",
                f"{w.get('description') or ''} on {fp.get('name', w['device'])} "
                f"({w['device']}), torch {fp.get('torch')}, {d['created']}")
    if w.get("source") == "trace":  # gobrrr analyze: a profiler trace, not a run
        return (f"gobrrr analyze: {w['name']}",
                f"{w.get('description') or ''} ({w['device']}), torch {fp.get('torch')}, "
                f"ceilings {d['machine'].get('source')}, {d['created']}")
    title = f"gobrrr doctor: {w['name']}"
    sub = (f"{w.get('description') or ''} - batch {w.get('batch_size')} on "
           f"{fp.get('name', w['device'])} ({w['device']}), torch {fp.get('torch')}, "
           f"{d['created']}")
    return title, sub


def report_sections(d: dict[str, Any]) -> list[Section]:
    """The doctor report's sections, from Report.to_dict()."""
    parts: Any = environment().get_template("report.html.j2").module  # its macros
    b = d["budget"]
    total_s, parts_s = budget_parts(b)
    per = "step" if d["workload"].get("source") in ("trace", "script") else "call"
    show_step = bool(d.get("phases")) and (d["workload"].get("source") == "script"
                                           or bool(d.get("data_loading")))
    phases = phase_rows(b)
    per_op = b["per_op"]
    on, off = plottable_rows(per_op)
    off_s = sum(per_op[i]["time_s"] for i in off)
    roof_caption = (
        "Each dot is one op (all its calls): x = FLOPs per byte, y = achieved FLOP/s; "
        "area = its time; color = where its time went. Hover a dot for its name; the "
        "number is its row in the per-op table. Roofs are "
        + ("the datasheet's peaks of this GPU (not calibrated on this machine)"
           if d["machine"].get("source") == "datasheet" else
           "this machine's measured ceilings")
        + " (fp32 is also the roof of non-matmul math).")
    if off:
        roof_caption += (f" {len(off)} ops with no FLOPs or no bytes ({fmt_s(off_s)}) "
                         "cannot sit on a log-log roofline; they are in the table.")
    roof = (figure(roofline_svg(per_op, d["machine"]), roof_caption) if on
            else paragraph("No op with both FLOPs and bytes: nothing to place on a "
                           "roofline.", "note"))
    bs = d["experiments"].get("batch_scaling")
    batch_svg = batch_scaling_svg(bs) if bs and not bs.get("skipped") else None
    notes = list(d["notes"])
    if d["counts"]["uncounted_ops"]:
        notes.append("ops with no FLOP formula (counted as 0 FLOPs): "
                     + ", ".join(d["counts"]["uncounted_ops"]))
    from markupsafe import Markup

    notes_body = Markup("").join(paragraph(n, "note") for n in notes) if notes else \
        paragraph("none", "note")
    remedies = (_remedies_table(d) if d["remedies"]
                else paragraph("No remedy applies to this budget.", "note"))
    return [
        Section("verdict", "Verdict",
                parts.verdict(d, total_s, per, agreement_tone(d["verdict"]))),
        Section("budget", "Time budget",
                parts.budget(b, total_s, parts_s, per, Markup(budget_bar_svg(b)))),
        *([Section("generation", "Generation: prefill and decode",
                   _generation_body(d["generation"]))] if d.get("generation") else []),
        *([Section("step", "The step", _step_body(d))] if show_step else []),
        *([Section("phases", "Time by phase", _phases_body(phases, total_s))]
          if phases else []),
        Section("roofline", "Roofline", roof),
        Section("experiments", "Experiments",
                parts.experiments(d, Markup(batch_svg) if batch_svg else None)),
        *([Section("distributed", "Distributed: every rank",
                   _distributed_body(d["distributed"]))] if d.get("distributed") else []),
        Section("ops", "Per op", rows_table(per_op, total_s, numbered=True)),
        Section("modules", "Per module" + MODULES_TITLE.removeprefix("top modules"),
                rows_table(b["per_module"], total_s, count=OP_CALLS)),
        Section("classes", "Per op class", rows_table(b["per_class"], total_s,
                                                      count=OP_CALLS)),
        Section("below-roof", "Ops below their roof", _below_roof_table(d, total_s)),
        Section("remedies", "Remedies: predicted and measured gains", remedies),
        Section("notes", "Notes", notes_body),
        Section("machine", "Machine and software", parts.machine(
            d, _stack_table(d), _ceilings_table(d["machine"]))),
    ]


def render_report(d: dict[str, Any], *, standalone: bool = True) -> str:
    title, sub = title_of(d)
    return render_page(title, report_sections(d), subtitle=sub, standalone=standalone,
                       footer=f"gobrrr {d['gobrrr_version']}; figures drawn from the "
                              "numbers in this report's JSON (gobrrr doctor --json).")


def write_report(d: dict[str, Any], path: str | Path) -> Path:
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(render_report(d), encoding="utf-8")
    return p
