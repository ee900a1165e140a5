"""The `gobrrr optimize --html` page: the winner, every remedy's predicted vs measured
gain with its verification, and the code to apply the winner. Built from
`OptimizeResult.to_dict()` with the shared page blocks (so a saved --json renders too);
`optimize hf:NAME --generate N --html` from generation_optimize.py's dict the same way."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from gobrrr.remedies.result import KEEP, MEASURED
from gobrrr.show.page import Section, paragraph, render_page, table

__all__ = ["render_optimize", "write_optimize", "render_generation_optimize"]


def _x(v: float | None) -> tuple[str, float]:
    return ("-", 0.0) if v is None else (f"{v:.2f}x", v)


def _code(text: str) -> Any:
    from markupsafe import Markup, escape

    return Markup(f"<pre><code>{escape(text)}</code></pre>")  # noqa: S704 - escaped


def _summary_cell(s: dict[str, Any] | None) -> str:
    from gobrrr.remedies.prediction_record import ErrorSummary

    return "-" if not s else ErrorSummary(**s).text()


def _prediction_record(record: list[dict[str, Any]]) -> Section:
    """How far each kind of prediction has been off (remedies/prediction_record.py)."""
    source = next((k["validation_source"] for k in record if k.get("validation_source")),
                  None)
    rows = [[k["kind"], _summary_cell(k["this_run"]), _summary_cell(k.get("validation")),
             _summary_cell(k.get("this_machine"))] for k in record]
    intro = ("measured / predicted speedup, by what the prediction rests on: this run's "
             "measured candidates" + (f"; the validation suite: {source}" if source else
                                      "; no validation suite for this device") +
             "; this machine's earlier optimize runs")
    return Section("predictions", "How far the predictions have been off",
                   paragraph(intro) + table(["kind", "this run", "validation suite",
                                             "this machine, earlier"], rows,
                                            text_columns=(0, 1, 2, 3)))


def render_optimize(d: dict[str, Any]) -> str:
    best = d["best"]
    w = d["workload"]
    pred = best.get("predicted_speedup")
    headline = (f"Best verified: {best['name']}, {_x(best.get('measured_speedup'))[0]} "
                f"measured" + (f" (predicted {pred:.2f}x)" if pred else "")
                if best.get("status") != "baseline" else
                # optimize JSON before "conclusion" (and its baseline reason) said this
                (d.get("conclusion") or best.get("reason") or KEEP).capitalize() + ".")
    unverifiable = sum(r["status"] == "unverifiable" for r in d["remedies"])
    if unverifiable:
        headline += (f" {unverifiable} remedy result(s) unverifiable: their outputs could not "
                     "be judged against eager's (see the reasons); timed, never chosen.")
    rows = []
    for r in d["remedies"]:
        iv = r.get("interval")
        rows.append([
            r["name"], r.get("regime") or "-", r["status"],
            _x(r.get("predicted_speedup")), _x(r.get("measured_speedup")),
            f"{iv[0]:.2f}-{iv[1]:.2f}" if iv else "-",
            # a candidate abandoned after its outputs were checked is "skipped": no
            # "verified yes" beside it (issue 25)
            ("yes" if r.get("verified") else "no") if r["status"] in MEASURED else "-",
            r.get("reason") or "",
        ])
    sections = [
        Section("result", "Result", paragraph(headline)),
        Section("remedies", "Remedies: predicted from the budget, measured A/B",
                table(["remedy", "regime", "status", "predicted", "measured", "95% interval",
                       "verified", "reason"], rows, text_columns=(0, 1, 2, 5, 6, 7),
                      name_columns=(0, 7))),
        Section("snippet", "Apply the winner", _code(d.get("snippet") or "")),
    ]
    if d.get("prediction_record"):
        sections.insert(2, _prediction_record(d["prediction_record"]))
    if d.get("notes"):
        sections.append(Section("notes", "Notes", paragraph("; ".join(d["notes"]))))
    subtitle = (f"{w.get('name')} on {w.get('device')}"
                + (f", batch {w['batch_size']}" if w.get("batch_size") else "")
                + (f", diagnosed {d['regime']}-bound" if d.get("regime") else "")
                + f", {d.get('created', '')}")
    return render_page(f"gobrrr optimize: {w.get('name')}", sections, subtitle=subtitle)


def _verdict(c: dict[str, Any]) -> str:
    if c.get("error"):
        return c["error"]
    if c.get("passed"):
        return "exact" if c.get("exact") else "verified"
    return "rejected: logits disagree"


def render_generation_optimize(d: dict[str, Any]) -> str:
    """The `optimize --generate` page: the conclusion, every candidate's tokens/s and
    verification (teacher-forced logits), the winner's code, the larger-batch advice."""
    from gobrrr.show.figures import candidates_svg
    from gobrrr.show.page import figure

    rows = []
    for c in d["candidates"]:
        tps = c.get("tokens_per_s")
        rows.append([
            c["name"], c.get("kind") or "-",
            ("-", 0.0) if tps is None else (f"{tps:,.1f}", tps), _x(c.get("speedup")),
            ("-", 0.0) if c.get("prep_s") is None else (f"{c['prep_s']:.1f} s", c["prep_s"]),
            ("-", -1.0) if c.get("top1_agreement") is None else
            (f"{c['top1_agreement']:.0%}", c["top1_agreement"]),
            ("-", -1.0) if c.get("rel_err") is None else (f"{c['rel_err']:.1e}", c["rel_err"]),
            _verdict(c), c.get("note") or "",
        ])
    sections = [Section("result", "Result", paragraph(d["conclusion"]))]
    svg = candidates_svg(d)
    if svg:
        sections.append(Section("tokens", "Tokens/s, measured A/B against the baseline",
                                figure(svg, f"baseline {d['baseline_tokens_per_s']:,.1f} "
                                       "tokens/s (dotted)")))
    sections.append(Section(
        "candidates", "Candidates: timed A/B, verified by teacher-forced logits",
        table(["candidate", "kind", "tokens/s", "speedup", "warm-up", "top-1", "rel err",
               "verdict", "note"], rows, text_columns=(0, 1, 7, 8), name_columns=(0,))))
    winner = next((c for c in d["candidates"] if c["name"] == d.get("winner")), None)
    if winner is not None and winner.get("how"):
        sections.append(Section("snippet", "Apply the winner", _code(winner["how"])))
    if d.get("notes"):
        sections.append(Section("notes", "Notes", paragraph("; ".join(d["notes"]))))
    subtitle = (f"{d['name']} on {d['device']}: batch {d['batch']}, {d['prompt_len']}-token "
                f"prompt, {d['new_tokens']} new tokens, {d['dtype']}; baseline "
                f"{d['baseline_tokens_per_s']:,.1f} tokens/s")
    return render_page(f"gobrrr optimize --generate: {d['name']}", sections,
                       subtitle=subtitle)


def write_optimize(d: dict[str, Any], path: str | Path) -> Path:
    """The page of an optimize result, or of an `optimize --generate` one (its schema)."""
    out = Path(path)
    page = (render_generation_optimize(d) if d.get("schema") == "gobrrr.optimize_generation"
            else render_optimize(d))
    out.write_text(page, encoding="utf-8")
    return out
