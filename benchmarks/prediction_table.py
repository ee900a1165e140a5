"""Issue 24 item 4: predicted against measured for every candidate optimize measured on
the validation suite (the nine rows of one `optimize-budget60.md`), and the per-kind
summary the optimize report reads (`src/gobrrr/remedies/prediction_record.json`;
gobrrr.remedies.prediction_record).

    python benchmarks/prediction_table.py [--check] [--suite h100-al|h200|h100-ae]

Each suite's table goes beside its rows (`prediction-vs-measured.{md,json}`). The
package's summary is the newest suite's, `h100-al`: session al's H100 rows, all nine on
one code (5026361) and each against a hand side of the same machine; the device tool
lent no H200 for that run. `h200` (four sittings, older code) and `h100-ae` (session ae,
8474694) are kept beside it. `--check` writes nothing and fails if the package suite's
table or the package's summary differs from what its rows give (the test suite runs it:
the package's summary has one source, these rows).
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "src" / "gobrrr" / "remedies" / "prediction_record.json"
H100 = ROOT / "benchmarks" / "results" / "h100"
CASES = {"hf:gpt2 --batch-size 1 --seq-len 1": "gpt2_1x1",
         "hf:gpt2 --batch-size 8 --seq-len 512": "gpt2_8x512",
         "torchvision:resnet50 --batch-size 1": "resnet50_b1",
         "torchvision:resnet50 --batch-size 256": "resnet50_b256",
         "torchvision:vit_b_16 --batch-size 32": "vit_b16_b32",
         "hf:gpt2 --batch-size 8 --seq-len 256 --train": "gpt2_train_8x256",
         "optimize_targets.py:mlp_16k --batch-size 16384": "mlp_16k",
         "hf:bert-base-uncased --batch-size 32 --seq-len 128": "bert_base_b32x128",
         "timm:convnext_tiny --batch-size 64": "convnext_tiny_b64"}
T = "session-2026-12-04t"
AB = "session-2026-12-05ab"
AG = "session-2026-12-05ag/calls/3-rows/models"
# Session al's two gobrrr calls: the first five rows, then the other four.
AL_FIRST = ("gpt2_1x1", "gpt2_8x512", "resnet50_b1", "resnet50_b256", "gpt2_train_8x256")


@dataclass(frozen=True)
class Suite:
    base: Path
    rows: dict[str, str]  # workload -> its optimize JSON, relative to base
    card: str
    source: str  # the package summary's words for it


SUITES = {
    "h100-al": Suite(
        H100 / "session-2026-12-06al",
        {w: f"calls/{'1-rows' if c in AL_FIRST else '3-rows'}/gobrrr_{c}.json"
         for w, c in CASES.items()},
        "H100",
        "the validation suite (optimize --budget-s 60, nine models, one NVIDIA H100, "
        "2026-12-06, session al: all nine on one code)"),
    # The newest sitting of each row, as h200/optimize-budget60.md's table takes them.
    "h200": Suite(
        ROOT / "benchmarks" / "results" / "h200",
        {"hf:gpt2 --batch-size 1 --seq-len 1": f"{AB}/rows2/models/gobrrr_gpt2_1x1.json",
         "hf:gpt2 --batch-size 8 --seq-len 512": f"{AB}/models/gobrrr_gpt2_8x512.json",
         "torchvision:resnet50 --batch-size 1": f"{AB}/rows2/models/gobrrr_resnet50_b1.json",
         "torchvision:resnet50 --batch-size 256":
             f"{T}/rows_b/models/gobrrr_resnet50_b256.json",
         "torchvision:vit_b_16 --batch-size 32": f"{AG}/gobrrr_vit_b16_b32.json",
         "hf:gpt2 --batch-size 8 --seq-len 256 --train":
             f"{AB}/models/gobrrr_gpt2_train_8x256.json",
         "optimize_targets.py:mlp_16k --batch-size 16384": f"{AG}/gobrrr_mlp_16k.json",
         "hf:bert-base-uncased --batch-size 32 --seq-len 128":
             f"{AG}/gobrrr_bert_base_b32x128.json",
         "timm:convnext_tiny --batch-size 64": f"{AG}/gobrrr_convnext_tiny_b64.json"},
        "H200",
        "the H200 validation suite (optimize --budget-s 60, nine models, 2026-12-04/05; "
        "four rows from session ab, four from session ag, one from session t)"),
    "h100-ae": Suite(H100 / "session-2026-12-05ae",
                     {w: f"models/gobrrr_{c}.json" for w, c in CASES.items()}, "H100",
                     "session ae's H100 rows (all nine on one code, 8474694)"),
}
PACKAGE_SUITE = "h100-al"


def table(suite: Suite) -> list[dict[str, Any]]:
    from gobrrr.remedies.prediction_record import WITHIN, checked

    out = []
    for workload, rel in suite.rows.items():
        rows = json.loads((suite.base / rel).read_text())["remedies"]
        by_name = {r["name"]: r for r in rows}
        for kind, name, ratio in checked(rows):
            r = by_name[name]
            out.append({"workload": workload, "candidate": name, "kind": kind,
                        "status": r["status"], "predicted": r["predicted_speedup"],
                        "measured": r["measured_speedup"], "ratio": ratio,
                        "within": 1 / WITHIN <= ratio <= WITHIN, "source": rel})
    return out


def summary(rows: list[dict[str, Any]], suite: Suite) -> dict[str, Any]:
    from gobrrr.remedies.prediction_record import KINDS, summarize

    kinds = {}
    for kind in KINDS:
        s = summarize(r["ratio"] for r in rows if r["kind"] == kind)
        if s is not None:
            kinds[kind] = {k: (round(v, 4) if isinstance(v, float) else v)
                           for k, v in s.to_dict().items()}
    table_md = suite.base.relative_to(ROOT) / "prediction-vs-measured.md"
    return {"device": "cuda", "source": suite.source, "table": table_md.as_posix(),
            "kinds": kinds}


def markdown(rows: list[dict[str, Any]], summ: dict[str, Any], suite: Suite,
             in_package: bool) -> str:
    from gobrrr.remedies.prediction_record import WITHIN

    package = SUITES[PACKAGE_SUITE].base.relative_to(ROOT).as_posix()
    lines = [
        f"# Predicted against measured: every candidate optimize measured on the {suite.card} "
        "validation suite", "",
        "Written by `benchmarks/prediction_table.py` from the optimize rows of "
        "`optimize-budget60.md` (the `source` column, under this folder). One NVIDIA "
        f"{suite.card}, torch 2.11.0+cu130. A candidate counts when a "
        "measurement checked its prediction: verified, no significant change or slower "
        "(outputs verified, timed A/B against eager). ratio = measured / predicted; "
        f"within: {1 / WITHIN:.2f} <= ratio <= {WITHIN:g}. The kinds are "
        "`gobrrr.remedies.prediction_record.kind_of`'s; "
        + ("the summary below is what `gobrrr optimize` prints beside its own candidates "
           "on a CUDA machine." if in_package else "`gobrrr optimize` prints another "
           f"suite's summary (`{package}/prediction-vs-measured.md`), not this one."),
        "",
        "## By kind", "",
        "| kind | measured | within 1.5x | ratio low | median | high |",
        "|---|---|---|---|---|---|",
    ]
    for kind, s in summ["kinds"].items():
        lines.append(f"| {kind} | {s['n']} | {s['within']} | {s['low']:.2f} | "
                     f"{s['median']:.2f} | {s['high']:.2f} |")
    lines += ["", "## Every candidate", "",
              "| workload | candidate | kind | status | predicted | measured | ratio | "
              "within | source |", "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['workload']} | {r['candidate']} | {r['kind']} | {r['status']} | "
                     f"{r['predicted']:.2f}x | {r['measured']:.2f}x | {r['ratio']:.2f} | "
                     f"{'yes' if r['within'] else 'no'} | {r['source']} |")
    return "\n".join(lines) + "\n"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true",
                    help="write nothing; fail if the package suite's table or the "
                         "package's summary differs from what its rows give")
    ap.add_argument("--suite", choices=sorted(SUITES), default=PACKAGE_SUITE)
    a = ap.parse_args()
    name = PACKAGE_SUITE if a.check else a.suite
    suite = SUITES[name]
    rows = table(suite)
    summ = summary(rows, suite)
    in_package = name == PACKAGE_SUITE
    files = {suite.base / "prediction-vs-measured.json": json.dumps(rows, indent=1) + "\n",
             suite.base / "prediction-vs-measured.md": markdown(rows, summ, suite,
                                                                in_package)}
    if in_package:
        files[PACKAGE] = json.dumps(summ, indent=1) + "\n"
    stale = [p for p, text in files.items() if not p.exists() or p.read_text() != text]
    if a.check:
        for p in stale:
            print(f"{p.relative_to(ROOT)} differs from what the rows give: run "
                  "python benchmarks/prediction_table.py", file=sys.stderr)
        return 1 if stale else 0
    for p, text in files.items():
        p.write_text(text)
    for kind, s in summ["kinds"].items():
        print(f"{kind}: {s['n']} measured, {s['within']} within 1.5x, ratio "
              f"{s['low']:.2f}-{s['high']:.2f} (median {s['median']:.2f})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
