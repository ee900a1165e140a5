#!/usr/bin/env bash
# Issue 14 on 2 GPUs (nvidia-h200-x2, torch 2.11, NCCL): gobrrr doctor under torchrun on
# the communication-bound and compute-bound DDP examples, with the no_sync ground truth
# (the experiment runs in every doctor), each rank's profiled trace kept for the HTA
# cross-check on the CPU machine, and a raw nvidia-smi topology. Under 5 minutes in all.
#   bash benchmarks/dist_gpu.sh            (writes under $OUT, default ./out-dist)
set -u
OUT=${OUT:-out-dist}
mkdir -p "$OUT"
PY=${PY:-python}
NPROC=${NPROC:-2}
{
  $PY -c "import torch, torch.distributed as d; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'nccl', torch.cuda.nccl.version(), 'gpus', torch.cuda.device_count())"
  nvidia-smi topo -m || true
  env | grep '^NCCL_' || true
} > "$OUT/env.txt" 2>&1
# The communication ceilings first (from the cache when dist_calibrate.sh ran): the doctor
# reports each collective's % of the calibrated busbw and projects from this curve.
timeout 300 $PY -m torch.distributed.run --standalone --nproc-per-node "$NPROC" -m gobrrr \
    calibrate --distributed --json > "$OUT/comm_ceilings.json" 2> "$OUT/comm_ceilings.err"
echo "calibrate --distributed rc=$?" | tee -a "$OUT/summary.txt"
for ex in ddp_comm ddp_compute ddp_straggler; do
  start=$(date +%s)
  # NCCL_DEBUG=VERSION: NCCL's version on stderr, once per rank
  NCCL_DEBUG=VERSION timeout 150 $PY -m torch.distributed.run --standalone \
      --nproc-per-node "$NPROC" -m gobrrr doctor "examples:$ex" --device cuda --json \
      --time-budget 1 --rank-traces "$OUT/traces_$ex" --html "$OUT/$ex.html" \
      > "$OUT/$ex.json" 2> "$OUT/$ex.err"
  echo "$ex rc=$? $(( $(date +%s) - start )) s" | tee -a "$OUT/summary.txt"
done
# One line per case: gobrrr's exposed-communication share vs the no_sync bound, per rank.
$PY - "$OUT" <<'PYEOF' | tee -a "$OUT/summary.txt"
import json, sys, pathlib
out = pathlib.Path(sys.argv[1])
for ex in ("ddp_comm", "ddp_compute", "ddp_straggler"):
    try:
        d = json.loads((out / f"{ex}.json").read_text())
    except Exception as exc:
        print(ex, "no report:", exc); continue
    dd = d["distributed"]
    for r in dd["ranks"]:
        ns = r.get("no_sync") or {}
        print(f"{ex} rank {r['rank']}: regime {r['regime']}, fractions "
              + ", ".join(f"{k} {100 * v:.1f}%" for k, v in r["fractions"].items())
              + f"; exposed transfer {r['exposed_transfer_s'] * 1e3:.2f} ms, waiting "
              f"{r['exposed_waiting_s'] * 1e3:.2f} ms ({r.get('waiting_source')}; profiled "
              f"{(r.get('exposed_waiting_profiled_s') or 0) * 1e3:.2f} ms), DDP bucket copies "
              f"{(r.get('ddp_bucket_copy_s') or 0) * 1e3:.2f} ms; no_sync bound "
              f"{(ns.get('bound_fraction') or 0) * 100:.1f}% "
              f"(sync {ns.get('sync_s')}, no_sync {ns.get('no_sync_s')})")
    print(ex, "collectives:", [(c["collective"], c["bytes"], round(c["busbw_gbps"] or 0, 1),
                                c.get("pct_of_ceiling")) for c in dd["collectives"]][:6],
          "stragglers:", dd["stragglers"], "diagnose_s", round(d["diagnose_s"], 1))
    print(ex, "projection check:", dd.get("projection_check"), "bandwidth:",
          dd.get("projection_bandwidth"))
PYEOF
