#!/usr/bin/env bash
# Issue 14 (FSDP2 parts of items 3, 4, 5, 7) on 2 GPUs (nvidia-h200-x2, torch 2.11, NCCL):
# gobrrr doctor and optimize under torchrun on the communication-bound and compute-bound
# FSDP2 examples (examples:fsdp_comm: 12 fully_shard units of 4096^2 fp32 at batch 16;
# examples:fsdp_compute: 2 units at batch 16384). The doctor runs the FSDP2
# no-communication experiment (parameters kept unsharded) as the ground truth and keeps
# each rank's profiled trace (for the HTA cross-check on the CPU machine); optimize runs
# reshard_after_forward=False and explicit prefetching, verified and A/B-timed in
# lockstep. Timeouts: 2 x 50 s + 2 x 65 s = 230 s at most: under 4 minutes.
#   OUT=out bash benchmarks/dist_fsdp_gpu.sh       (writes under $OUT)
# With little device time left: STAGES=doctor TRACES=0 (no rank traces or HTML pages:
# six small files, the doctor's ground-truth comparison only).
set -u
OUT=${OUT:-out-dist-fsdp}
mkdir -p "$OUT"
PY=${PY:-python}
NPROC=${NPROC:-2}
STAGES=${STAGES:-doctor optimize}
TRACES=${TRACES:-1}
DOCTOR_S=${DOCTOR_S:-50}
{
  $PY -c "import torch, torch.distributed as d; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'nccl', torch.cuda.nccl.version(), 'gpus', torch.cuda.device_count()); from torch.distributed.fsdp import fully_shard, FSDPModule; print('fully_shard ok')"
  nvidia-smi topo -m || true
} > "$OUT/env.txt" 2>&1
for ex in fsdp_comm fsdp_compute; do
  case " $STAGES " in *" doctor "*) ;; *) break ;; esac
  keep=()
  [ "$TRACES" = 1 ] && keep=(--rank-traces "$OUT/traces_$ex" --html "$OUT/$ex.html")
  start=$(date +%s)
  NCCL_DEBUG=VERSION timeout "$DOCTOR_S" $PY -m torch.distributed.run --standalone \
      --nproc-per-node "$NPROC" -m gobrrr doctor "examples:$ex" --device cuda --json \
      --time-budget 1 "${keep[@]}" > "$OUT/$ex.json" 2> "$OUT/$ex.err"
  echo "doctor $ex rc=$? $(( $(date +%s) - start )) s" | tee -a "$OUT/summary.txt"
done
for ex in fsdp_comm fsdp_compute; do
  case " $STAGES " in *" optimize "*) ;; *) break ;; esac
  start=$(date +%s)
  timeout 65 $PY -m torch.distributed.run --standalone --nproc-per-node "$NPROC" \
      -m gobrrr optimize "examples:$ex" --device cuda --budget-s 40 --json \
      > "$OUT/optimize_$ex.json" 2> "$OUT/optimize_$ex.err"
  echo "optimize $ex rc=$? $(( $(date +%s) - start )) s" | tee -a "$OUT/summary.txt"
done
# One line per rank: gobrrr's exposed-communication share vs the unsharded bound; the
# collectives; one line per remedy.
$PY - "$OUT" <<'PYEOF' | tee -a "$OUT/summary.txt"
import json, sys, pathlib
out = pathlib.Path(sys.argv[1])
for ex in ("fsdp_comm", "fsdp_compute"):
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
              f"{r['exposed_waiting_s'] * 1e3:.2f} ms ({r.get('waiting_source')}); "
              f"{ns.get('method')} bound {(ns.get('bound_fraction') or 0) * 100:.1f}% "
              f"(sync {ns.get('sync_s')}, unsharded {ns.get('no_sync_s')}; {ns.get('skipped')})")
    print(ex, "collectives:", [(c["collective"], c["bytes"], c["calls_per_step"],
                                round(c["busbw_gbps"] or 0, 1)) for c in dd["collectives"]],
          "diagnose_s", round(d["diagnose_s"], 1))
    print(ex, "notes:", [n[:160] for n in d["notes"]][:8])
for ex in ("fsdp_comm", "fsdp_compute"):
    try:
        d = json.loads((out / f"optimize_{ex}.json").read_text())
    except Exception as exc:
        print("optimize", ex, "no result:", exc); continue
    for r in d["remedies"]:
        print(f"optimize {ex} {r['name']}: {r['status']}, predicted "
              f"{r['predicted_speedup']}, measured {r['measured_speedup']}, max error "
              f"{r['max_error']}: {r['reason'][:160]}")
PYEOF
