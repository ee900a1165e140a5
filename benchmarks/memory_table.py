"""Issue 26's table (item 5): gobrrr memory's predicted peak against the allocator's
measured peak, and its predicted largest batch against the largest that ran, on real
models. Each row runs `gobrrr memory TARGET ... --json` as a user would, in a fresh
process (a process's exit frees what a step held):

- at each batch of the case: `peak_bytes` (torch's MemTracker over one step: what
  gobrrr predicts from the live tensors) against `allocator.max_allocated_bytes`
  (`torch.cuda.max_memory_allocated` over the same step);
- at the case's first batch with `--fit`: `fit.predicted_max_batch` against the
  largest batch that ran: the predicted batch when it ran and the next size up (+10%)
  ran out of memory; `largest_ran` of the bisection when the predicted one failed; when
  the next size up also ran, the largest that ran is at least that size (`at_least`).

    PYTHONPATH=src python3 benchmarks/memory_table.py --out DIR [--cases a,b]
    python3 benchmarks/memory_table.py --table DIR [DIR|ROWS.json ...] --json F --md F
    PYTHONPATH=src python3 benchmarks/memory_table.py --out DIR --throughput [--cases a,b]

--throughput (issue 26 item 3): at each case's first batch only, `gobrrr memory ... --fit
--throughput`: the step's samples/s at doubling batches up to the batch that fits, each
in a fresh process (DIR/CASE_throughput.json, and DIR/throughput.json: per case the
rungs, the knee and the gain); gobrrr's progress lines (each rung's time as it is
measured) pass through to stderr, so a run stopped at its timeout still shows them.

--table reads each DIR's rows.json, or when it has none its rows_*.json (one per device
call, when the cases ran in separate calls), or a rows file given itself; the rows are
ordered by case (CASES' order) and batch. A DIR's throughput.json (and its
CASE_throughput.json beside it, for each rung's spread) becomes a second table. Text
below the line HAND_MARK in an existing --md file is kept: the explanation written by
hand survives a rebuild.

BENCH_DEVICE=cpu runs the small smoke cases on CPU (the allocator figures and the fit
check are CUDA's; the script's logic only).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

DEV = os.environ.get("BENCH_DEVICE", "cuda")


@dataclass(frozen=True)
class Case:
    target: str
    batches: tuple[int, ...]
    options: tuple[str, ...] = ()


CASES: dict[str, Case] = {
    "gpt2_train_512": Case("hf:gpt2", (4, 8, 16), ("--seq-len", "512", "--train")),
    "resnet50_train": Case("torchvision:resnet50", (32, 64, 128), ("--train",)),
    "tinyllama_infer_2048": Case("hf:tinyllama-1.1b", (1, 2, 4),
                                 ("--seq-len", "2048", "--dtype", "bf16")),
}
SMOKE: dict[str, Case] = {  # BENCH_DEVICE=cpu: the logic, in seconds
    "mlp_train_cpu": Case("examples:mlp_train", (32, 64, 128)),
}


def gobrrr_memory(case: Case, batch: int, fit: bool, timeout_s: float) -> dict[str, Any]:
    cmd = [sys.executable, "-m", "gobrrr", "memory", case.target, "--batch-size", str(batch),
           "--device", DEV, *case.options, "--json", "-q", *(["--fit"] if fit else [])]
    t0 = time.perf_counter()
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s, check=False)
    if p.returncode != 0:
        tail = [ln for ln in p.stderr.splitlines() if ln.strip()][-3:]
        return {"error": " | ".join(tail) or f"exit {p.returncode}",
                "seconds": time.perf_counter() - t0}
    d: dict[str, Any] = json.loads(p.stdout)
    d["seconds"] = time.perf_counter() - t0
    return d


def gobrrr_throughput(case: Case, timeout_s: float) -> dict[str, Any]:
    """`gobrrr memory --fit --throughput` at the case's first batch, stderr passed
    through; stopped with its process group (the ladder's child too) at `timeout_s`."""
    import signal

    batch = case.batches[0]
    cmd = [sys.executable, "-m", "gobrrr", "memory", case.target, "--batch-size", str(batch),
           "--device", DEV, *case.options, "--json", "--fit", "--throughput"]
    t0 = time.perf_counter()
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True, start_new_session=True)
    try:
        out, _ = p.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        p.communicate()
        return {"error": f"no result within {timeout_s:.0f} s (the rungs measured are in "
                         "the log)", "seconds": time.perf_counter() - t0}
    if p.returncode != 0:
        return {"error": f"exit {p.returncode} (its reason is in the log)",
                "seconds": time.perf_counter() - t0}
    d: dict[str, Any] = json.loads(out)
    d["seconds"] = time.perf_counter() - t0
    return d


def run_throughput(names: list[str], cases: dict[str, Case], out: Path,
                   timeout_s: float) -> None:
    path = out / "throughput.json"
    rows = json.loads(path.read_text()) if path.exists() else []
    for name in names:
        case = cases[name]
        print(f"[{time.strftime('%H:%M:%S')}] {name} batch {case.batches[0]} --fit "
              "--throughput", file=sys.stderr, flush=True)
        d = gobrrr_throughput(case, timeout_s)
        (out / f"{name}_throughput.json").write_text(json.dumps(d, indent=1))
        fit = d.get("fit") or {}
        tp = fit.get("throughput") or {}
        row = {"case": name, "workload": f"{case.target} {' '.join(case.options)}".strip(),
               "batch": case.batches[0], "predicted_max_batch": fit.get("predicted_max_batch"),
               "fit_batch": tp.get("fit_batch"), "fit_source": tp.get("fit_source"),
               "rungs": [{k: r.get(k) for k in ("batch", "step_s", "samples_per_s", "error")}
                         for r in tp.get("rungs", [])],
               "knee_batch": tp.get("knee_batch"), "knee_gain": tp.get("knee_gain"),
               "gain_at_fit": tp.get("gain_at_fit"),
               "gain_at_largest_timed": tp.get("gain_at_largest_timed"),
               "seconds": d.get("seconds"), "error": d.get("error")}
        print(f"   {row}", file=sys.stderr, flush=True)
        rows = [r for r in rows if r["case"] != name] + [row]
        path.write_text(json.dumps(rows, indent=1))  # kept as each case ends


def measured_max_batch(fit: dict[str, Any]) -> tuple[int | None, str]:
    """(the largest batch that ran, how it is known) from `fit.checked`."""
    checked = fit.get("checked")
    if not checked:
        return None, "not checked (CPU)"
    pred, up = checked.get("predicted", {}), checked.get("next_up", {})
    if "largest_ran" in checked:
        got = checked["largest_ran"]
        return got.get("batch"), f"bisected ({got.get('runs')} runs, between {got.get('between')})"
    if pred.get("ran") and up.get("ran"):
        return up.get("batch"), "at_least: the next size up ran too"
    if pred.get("ran") and up.get("oom"):
        return pred.get("batch"), "the predicted ran, the next size up ran out of memory"
    return None, f"unclear: predicted {pred}, next up {up}"


def run_case(name: str, case: Case, out: Path, timeout_s: float) -> list[dict[str, Any]]:
    rows = []
    for i, b in enumerate(case.batches):
        fit = i == 0
        print(f"[{time.strftime('%H:%M:%S')}] {name} batch {b}{' --fit' if fit else ''}",
              file=sys.stderr, flush=True)
        d = gobrrr_memory(case, b, fit, timeout_s)
        (out / f"{name}_b{b}.json").write_text(json.dumps(d, indent=1))
        alloc = d.get("allocator") or {}
        row: dict[str, Any] = {
            "workload": f"{case.target} {' '.join(case.options)}".strip(), "case": name,
            "batch": b, "predicted_peak_bytes": d.get("peak_bytes"),
            "measured_peak_bytes": alloc.get("max_allocated_bytes"),
            "predicted_max_batch": None, "measured_max_batch": None,
            "seconds": d.get("seconds"), "error": d.get("error")}
        if fit and d.get("fit"):
            row["predicted_max_batch"] = d["fit"].get("predicted_max_batch")
            row["measured_max_batch"], row["max_batch_how"] = measured_max_batch(d["fit"])
            # the line alone (without CUDA's largest-tensor-twice term) and what the
            # checks ran beside, for reading the prediction against the check
            row["line_max_batch"] = d["fit"].get("line_max_batch")
            row["beside_bytes"] = (d["fit"].get("checked") or {}).get("beside_bytes")
        row["largest_allocation_bytes"] = d.get("largest_allocation_bytes")
        print(f"   {row}", file=sys.stderr, flush=True)
        rows.append(row)
    return rows


def _pct(pred: float | None, meas: float | None) -> str:
    return "-" if not pred or not meas else f"{(pred - meas) / meas:+.1%}"


HAND_MARK = "<!-- written by hand below: kept by memory_table.py --table -->"


def read_rows(paths: list[Path]) -> tuple[list[dict[str, Any]], list[Path]]:
    """The rows of every rows file named or found in the dirs, ordered by case and batch,
    and the dirs (for their throughput.json)."""
    files: list[Path] = []
    dirs: list[Path] = []
    for p in paths:
        if p.is_dir():
            dirs.append(p)
            files += [p / "rows.json"] if (p / "rows.json").exists() else sorted(
                p.glob("rows_*.json"))
        else:
            files.append(p)
    if not files:
        raise SystemExit(f"no rows.json or rows_*.json in {', '.join(map(str, paths))}")
    rows = [r for f in files for r in json.loads(f.read_text())]
    order = {n: i for i, n in enumerate([*CASES, *SMOKE])}
    rows.sort(key=lambda r: (order.get(r.get("case", ""), len(order)), r.get("case", ""),
                             r["batch"]))
    return rows, dirs


def throughput_lines(d: Path) -> list[str]:
    """throughput.json of one dir as a table per case: each rung's step, samples/s, the gain
    over the case's batch and over the rung before; the knee and the gain at the fit."""
    path = d / "throughput.json"
    if not path.exists():
        return []
    lines = ["", "## What a larger batch buys (`gobrrr memory --fit --throughput`)", "",
             "The step timed at the case's batch and at doubling batches up to the batch "
             "that fits (gobrrr's timer, no profiler).",
             f"From `{path.as_posix()}`."]
    for t in json.loads(path.read_text()):
        full = d / f"{t['case']}_throughput.json"
        tp = ((json.loads(full.read_text()).get("fit") or {}).get("throughput") or {}
              if full.exists() else {})
        spread = {r["batch"]: r for r in tp.get("rungs", [])}
        knee_gain = t.get("knee_gain") or tp.get("knee_gain")
        where = f" ({tp['where']})" if tp.get("where") else ""
        lines += ["", f"### {t['workload']}, batch {t['batch']}{where}", "",
                  "| batch | step ms | samples/s | x batch " + str(t["batch"]) +
                  " | x the rung before | spread (IQR / median) |",
                  "|---|---|---|---|---|---|"]
        rungs = [r for r in t["rungs"] if r.get("samples_per_s")]
        base = rungs[0]["samples_per_s"] if rungs else None
        for i, r in enumerate(t["rungs"]):
            if not r.get("samples_per_s"):
                lines.append(f"| {r['batch']} | - | - | - | - | {r.get('error') or '-'} |")
                continue
            prev = t["rungs"][i - 1].get("samples_per_s") if i else None
            step_up = f"{r['samples_per_s'] / prev:.2f}x" if prev else "-"
            s = spread.get(r["batch"], {})
            iqr = (f"{s['rel_iqr']:.2%}{' (noisy)' if s.get('noisy') else ''}"
                   if s.get("rel_iqr") is not None else "-")
            lines.append(f"| {r['batch']} | {r['step_s'] * 1e3:.1f} | "
                         f"{r['samples_per_s']:.1f} | {r['samples_per_s'] / base:.2f}x | "
                         f"{step_up} | {iqr} |")
        knee = (f"from batch {t['knee_batch']} a doubling buys under "
                f"{knee_gain - 1:.0%} more samples/s" if t.get("knee_batch") and knee_gain
                else "no knee: every doubling timed bought "
                     f"{f'{knee_gain - 1:.0%} or more' if knee_gain else 'more'}")
        if t.get("gain_at_fit"):
            gain = (f"batch {t['fit_batch']} (the batch that fits, {t['fit_source']}) runs "
                    f"{t['gain_at_fit']:.2f}x the samples/s of batch {t['batch']}")
        elif t.get("gain_at_largest_timed") and rungs:
            gain = (f"the ladder stopped short of the batch that fits ({t.get('fit_batch')}); "
                    f"batch {rungs[-1]['batch']} runs {t['gain_at_largest_timed']:.2f}x the "
                    f"samples/s of batch {t['batch']}")
        else:
            gain = f"none measured ({t.get('error') or 'no rung ran'})"
        lines += ["", f"Knee: {knee}. Gain: {gain}."]
    return lines


def table(paths: list[Path], json_out: Path, md_out: Path) -> None:
    rows, dirs = read_rows(paths)
    keep = ("workload", "batch", "predicted_peak_bytes", "measured_peak_bytes",
            "predicted_max_batch", "measured_max_batch")
    json_out.write_text(json.dumps([{k: r.get(k) for k in keep} | {
        "max_batch_how": r.get("max_batch_how"), "error": r.get("error")} for r in rows],
        indent=1) + "\n")
    lines = ["# gobrrr memory: predicted against measured, H200", "",
             "Peaks: `peak_bytes` (MemTracker over one step) against "
             "`torch.cuda.max_memory_allocated` over the same step; batches: `--fit`'s "
             "prediction against the largest batch that ran (`benchmarks/memory_table.py`).",
             "", "| workload | batch | predicted peak GiB | measured GiB | off | predicted "
             "max batch | largest that ran | off |", "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        gib = [f"{r[k] / 2**30:.2f}" if r.get(k) else "-"
               for k in ("predicted_peak_bytes", "measured_peak_bytes")]
        lines.append(
            f"| {r['workload']} | {r['batch']} | {gib[0]} | {gib[1]} | "
            f"{_pct(r.get('predicted_peak_bytes'), r.get('measured_peak_bytes'))} | "
            f"{r.get('predicted_max_batch') or '-'} | {r.get('measured_max_batch') or '-'} | "
            f"{_pct(r.get('predicted_max_batch'), r.get('measured_max_batch'))} |")
    for d in dirs:
        lines += throughput_lines(d)
    hand = ""
    if md_out.exists() and HAND_MARK in (old := md_out.read_text()):
        hand = "\n" + old[old.index(HAND_MARK):]
    md_out.write_text("\n".join(lines) + "\n" + hand)
    print("\n".join(lines))


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", type=Path)
    ap.add_argument("--cases", default="")
    ap.add_argument("--timeout-s", type=float, default=900.0)
    ap.add_argument("--table", type=Path, nargs="+",
                    help="dirs (their rows.json, else rows_*.json) or rows files")
    ap.add_argument("--json", type=Path)
    ap.add_argument("--md", type=Path)
    ap.add_argument("--throughput", action="store_true",
                    help="the first batch of each case with --fit --throughput only")
    a = ap.parse_args()
    if a.table:
        table(a.table, a.json, a.md)
        return 0
    cases = SMOKE if DEV == "cpu" else CASES
    names = [c for c in a.cases.split(",") if c] or list(cases)
    a.out.mkdir(parents=True, exist_ok=True)
    if a.throughput:
        run_throughput(names, cases, a.out, a.timeout_s)
        return 0
    rows_path = a.out / "rows.json"
    rows = json.loads(rows_path.read_text()) if rows_path.exists() else []
    for n in names:
        rows = [r for r in rows if r["case"] != n] + run_case(n, cases[n], a.out, a.timeout_s)
        rows_path.write_text(json.dumps(rows, indent=1))  # kept as each case ends
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
