"""Issue 24 item 4: predicted against measured for every candidate optimize measured on
the validation suite (the nine H200 rows of `results/h200/optimize-budget60.md`, each
from the sitting that table takes), and the per-kind summary the optimize report reads
(`src/gobrrr/remedies/prediction_record.json`; gobrrr.remedies.prediction_record).

    python benchmarks/prediction_table.py [--check] [--suite h100-ae]

Writes `results/h200/prediction-vs-measured.{md,json}` and the package's summary;
`--check` writes nothing and fails if any of them differs from what the rows give (the
test suite runs it: the package's summary has one source, these rows). `--suite
h100-ae`: the same table for session ae's H100 rows (all nine on one code, 8474694),
beside them; the package's summary stays the H200 suite's.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
H200 = ROOT / "benchmarks" / "results" / "h200"
PACKAGE = ROOT / "src" / "gobrrr" / "remedies" / "prediction_record.json"
SOURCE = ("the H200 validation suite (optimize --budget-s 60, nine models, 2026-12-04/05; "
          "four rows from session ab, four from session ag, one from session t, the "
          "newest sitting of each)")
T = "session-2026-12-04t"
AB = "session-2026-12-05ab"
AG = "session-2026-12-05ag/calls/3-rows/models"
# The newest sitting of each row, as optimize-budget60.md's table takes them.
ROWS = {
    "hf:gpt2 --batch-size 1 --seq-len 1": f"{AB}/rows2/models/gobrrr_gpt2_1x1.json",
    "hf:gpt2 --batch-size 8 --seq-len 512": f"{AB}/models/gobrrr_gpt2_8x512.json",
    "torchvision:resnet50 --batch-size 1": f"{AB}/rows2/models/gobrrr_resnet50_b1.json",
    "torchvision:resnet50 --batch-size 256": f"{T}/rows_b/models/gobrrr_resnet50_b256.json",
    "torchvision:vit_b_16 --batch-size 32": f"{AG}/gobrrr_vit_b16_b32.json",
    "hf:gpt2 --batch-size 8 --seq-len 256 --train":
        f"{AB}/models/gobrrr_gpt2_train_8x256.json",
    "optimize_targets.py:mlp_16k --batch-size 16384": f"{AG}/gobrrr_mlp_16k.json",
    "hf:bert-base-uncased --batch-size 32 --seq-len 128":
        f"{AG}/gobrrr_bert_base_b32x128.json",
    "timm:convnext_tiny --batch-size 64": f"{AG}/gobrrr_convnext_tiny_b64.json",
}

H100_AE = ROOT / "benchmarks" / "results" / "h100" / "session-2026-12-05ae"
CASES = {"hf:gpt2 --batch-size 1 --seq-len 1": "gpt2_1x1",
         "hf:gpt2 --batch-size 8 --seq-len 512": "gpt2_8x512",
         "torchvision:resnet50 --batch-size 1": "resnet50_b1",
         "torchvision:resnet50 --batch-size 256": "resnet50_b256",
         "torchvision:vit_b_16 --batch-size 32": "vit_b16_b32",
         "hf:gpt2 --batch-size 8 --seq-len 256 --train": "gpt2_train_8x256",
         "optimize_targets.py:mlp_16k --batch-size 16384": "mlp_16k",
         "hf:bert-base-uncased --batch-size 32 --seq-len 128": "bert_base_b32x128",
         "timm:convnext_tiny --batch-size 64": "convnext_tiny_b64"}
ROWS_H100_AE = {w: f"models/gobrrr_{c}.json" for w, c in CASES.items()}


def table(base: Path = H200, sources: dict[str, str] = ROWS) -> list[dict[str, Any]]:
    from gobrrr.remedies.prediction_record import WITHIN, checked

    out = []
    for workload, rel in sources.items():
        rows = json.loads((base / rel).read_text())["remedies"]
        by_name = {r["name"]: r for r in rows}
        for kind, name, ratio in checked(rows):
            r = by_name[name]
            out.append({"workload": workload, "candidate": name, "kind": kind,
                        "status": r["status"], "predicted": r["predicted_speedup"],
                        "measured": r["measured_speedup"], "ratio": ratio,
                        "within": 1 / WITHIN <= ratio <= WITHIN, "source": rel})
    return out


def summary(rows: list[dict[str, Any]]) -> dict[str, Any]:
    from gobrrr.remedies.prediction_record import KINDS, summarize

    kinds = {}
    for kind in KINDS:
        s = summarize(r["ratio"] for r in rows if r["kind"] == kind)
        if s is not None:
            kinds[kind] = {k: (round(v, 4) if isinstance(v, float) else v)
                           for k, v in s.to_dict().items()}
    return {"device": "cuda", "source": SOURCE,
            "table": "benchmarks/results/h200/prediction-vs-measured.md", "kinds": kinds}


def markdown(rows: list[dict[str, Any]], summ: dict[str, Any], card: str = "H200") -> str:
    from gobrrr.remedies.prediction_record import WITHIN

    lines = [
        f"# Predicted against measured: every candidate optimize measured on the {card} "
        "validation suite", "",
        "Written by `benchmarks/prediction_table.py` from the optimize rows of "
        "`optimize-budget60.md` (each row's newest sitting: the `source` column, under "
        f"this folder). One NVIDIA {card}, torch 2.11.0+cu130. A candidate counts when a "
        "measurement checked its prediction: verified, no significant change or slower "
        "(outputs verified, timed A/B against eager). ratio = measured / predicted; "
        f"within: {1 / WITHIN:.2f} <= ratio <= {WITHIN:g}. The kinds are "
        "`gobrrr.remedies.prediction_record.kind_of`'s; "
        + ("the summary below is what `gobrrr optimize` prints beside its own candidates "
           "on a CUDA machine." if card == "H200" else "`gobrrr optimize` prints the H200 "
           "suite's summary (`results/h200/prediction-vs-measured.md`), not this one."),
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
                    help="write nothing; fail if a file differs from what the rows give")
    ap.add_argument("--suite", choices=("h200", "h100-ae"), default="h200")
    a = ap.parse_args()
    if a.suite == "h100-ae":
        rows = table(H100_AE, ROWS_H100_AE)
        summ = summary(rows)
        (H100_AE / "prediction-vs-measured.json").write_text(json.dumps(rows, indent=1)
                                                             + "\n")
        (H100_AE / "prediction-vs-measured.md").write_text(markdown(rows, summ, "H100"))
        for kind, s in summ["kinds"].items():
            print(f"{kind}: {s['n']} measured, {s['within']} within 1.5x")
        return 0
    rows = table()
    summ = summary(rows)
    files = {H200 / "prediction-vs-measured.json": json.dumps(rows, indent=1) + "\n",
             H200 / "prediction-vs-measured.md": markdown(rows, summ),
             PACKAGE: json.dumps(summ, indent=1) + "\n"}
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
