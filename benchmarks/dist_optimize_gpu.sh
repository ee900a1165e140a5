#!/usr/bin/env bash
# Issue 14, item 5 on 2 GPUs (nvidia-h200-x2, torch 2.11, NCCL): gobrrr optimize under
# torchrun on the communication-bound and compute-bound DDP examples: the distributed
# diagnosis, then bucket_cap_mb (1, 5, 100, 400 vs 25), gradient_as_bucket_view,
# static_graph and the bf16 compression hook, each re-wrapped on a copy, verified (outputs,
# parameter updates, gradients) and A/B-timed in lockstep on both ranks; the winners
# together. --budget-s 75 each: under 4 minutes in all (two runs of at most 115 s).
#   OUT=out bash benchmarks/dist_optimize_gpu.sh       (writes under $OUT)
set -u
OUT=${OUT:-out-dist-optimize}
mkdir -p "$OUT"
PY=${PY:-python}
NPROC=${NPROC:-2}
BUDGET_S=${BUDGET_S:-75}
$PY -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'nccl', torch.cuda.nccl.version(), 'gpus', torch.cuda.device_count())" > "$OUT/env.txt" 2>&1
for ex in ddp_comm ddp_compute; do
  start=$(date +%s)
  timeout 115 $PY -m torch.distributed.run --standalone --nproc-per-node "$NPROC" \
      -m gobrrr optimize "examples:$ex" --device cuda --budget-s "$BUDGET_S" --json \
      > "$OUT/optimize_$ex.json" 2> "$OUT/optimize_$ex.err"
  echo "$ex rc=$? $(( $(date +%s) - start )) s" | tee -a "$OUT/summary.txt"
done
# One table: predicted vs measured per remedy, with the verification's worst error.
$PY - "$OUT" <<'PYEOF' | tee "$OUT/optimize.md"
import json, sys, pathlib
out = pathlib.Path(sys.argv[1])
print("| workload | remedy | status | predicted | measured | 95% interval | eager ms | cand ms | max error |")
print("|---|---|---|---|---|---|---|---|---|")
for ex in ("ddp_comm", "ddp_compute"):
    try:
        d = json.loads((out / f"optimize_{ex}.json").read_text())
    except Exception as exc:
        print(f"| {ex} | no result: {exc} | | | | | | | |"); continue
    f = (d.get("distributed") or {}).get("facts") or {}
    for r in d["remedies"]:
        x = lambda v: "-" if v is None else f"{v:.2f}x"
        ms = lambda v: "-" if v is None else f"{v * 1e3:.2f}"
        iv = "-" if not r["interval"] else f"{r['interval'][0]:.2f}-{r['interval'][1]:.2f}"
        err = "-" if r["max_error"] is None else f"{r['max_error']:.2g}"
        print(f"| {ex} | {r['name']} | {r['status']} | {x(r['predicted_speedup'])} | "
              f"{x(r['measured_speedup'])} | {iv} | {ms(r['eager_s'])} | "
              f"{ms(r['candidate_s'])} | {err} |")
    print(f"\n{ex}: step {f.get('step_s')}, exposed comm {f.get('exposed_communication_s')}, "
          f"no_sync bound {f.get('no_sync_bound_s')}, grads {f.get('grad_bytes')} B; "
          f"best {d['best']['name']}; optimize_s {d['optimize_s']:.0f} "
          f"(diagnosis {d['diagnose_s']:.0f})\n")
PYEOF
