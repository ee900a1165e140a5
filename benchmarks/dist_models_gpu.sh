#!/usr/bin/env bash
# The distributed doctor and optimize on real programs, on 2 GPUs (nvidia-h200-x2, torch
# 2.11, NCCL): benchmarks/dist_targets.py's training-script targets, a Trainer holding a
# DDP model, AdamW and a warmup/cosine LambdaLR, its train_step the step:
#   gpt2_ddp      GPT-2 small (124 M parameters, fp32), batch 8 x seq 512 per GPU
#   resnet50_ddp  torchvision resnet50, batch 64 x 3 x 224 x 224 per GPU (skipped, and
#                 said, when torchvision does not import)
# doctor (four-way split per rank, the no_sync bound) and optimize (DDP remedies re-wrapped
# on a copy of trainer.model, verified and A/B-timed on both ranks) on each. Every step
# has a timeout; worst case 60 + 2 x (50 + 70) = 300 s, typically well under.
#   OUT=out bash benchmarks/dist_models_gpu.sh       (writes under $OUT)
set -u
OUT=${OUT:-out-dist-models}
mkdir -p "$OUT"
PY=${PY:-python}
NPROC=${NPROC:-2}
T=benchmarks/dist_targets.py
$PY -c "import torch, transformers; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'nccl', torch.cuda.nccl.version(), 'gpus', torch.cuda.device_count(), 'transformers', transformers.__version__)" > "$OUT/env.txt" 2>&1
$PY -c "import torchvision; print('torchvision', torchvision.__version__)" >> "$OUT/env.txt" 2>&1
# Calibrate once before torchrun: inside the run rank 0 calibrates while its peer waits.
timeout 60 $PY -m gobrrr calibrate --device cuda -q > "$OUT/calibrate.err" 2>&1
echo "calibrate rc=$?" | tee -a "$OUT/summary.txt"
run() {  # name batch cmd...
  local name=$1 batch=$2; shift 2
  local start=$(date +%s)
  "$@" > "$OUT/$name.json" 2> "$OUT/$name.err"
  echo "$name (batch $batch) rc=$? $(( $(date +%s) - start )) s" | tee -a "$OUT/summary.txt"
}
TR="$PY -m torch.distributed.run --standalone --nproc-per-node $NPROC -m gobrrr"
for spec in gpt2_ddp:8 resnet50_ddp:64; do
  name=${spec%%:*} batch=${spec##*:}
  if [ "$name" = resnet50_ddp ] && ! $PY -c "import torchvision" 2>/dev/null; then
    echo "$name skipped: torchvision does not import" | tee -a "$OUT/summary.txt"; continue
  fi
  keep=()  # TRACES=1: each rank's profiled trace kept (for analyze against this doctor)
  [ "${TRACES:-0}" = 1 ] && keep=(--rank-traces "$OUT/traces_$name")
  run "doctor_$name" "$batch" timeout 50 $TR doctor "$T:$name" --device cuda \
      --batch-size "$batch" --json --time-budget 0.5 "${keep[@]}"
  run "optimize_$name" "$batch" timeout 70 $TR optimize "$T:$name" --device cuda \
      --batch-size "$batch" --json --budget-s 40
done
# Per rank: the four-way split and the no_sync bound; per optimize: every remedy, the best.
$PY - "$OUT" <<'PYEOF' | tee -a "$OUT/summary.txt"
import json, sys, pathlib
out = pathlib.Path(sys.argv[1])
for name in ("gpt2_ddp", "resnet50_ddp"):
    try:
        d = json.loads((out / f"doctor_{name}.json").read_text())
        dd = d["distributed"]
        print(f"{name} doctor: regime {d['regime']}, step {d['timing']['median_s'] * 1e3:.1f} ms")
        for r in dd["ranks"]:
            fr = " ".join(f"{k} {v:.2f}" for k, v in r["fractions"].items())
            ns = r.get("no_sync") or {}
            b = ns.get("bound_fraction")
            print(f"  rank {r['rank']}: {fr}; no_sync bound "
                  + ("-" if b is None else f"{b:.2f} of the step") + (f" ({ns['skipped']})" if ns.get("skipped") else ""))
        for c in dd["collectives"][:3]:
            print(f"  {c['collective']} {c['bytes']} B: {c['calls_per_step']:g} per step, busbw {c['busbw_gbps']} GB/s")
    except Exception as exc:
        print(f"{name} doctor: no report ({exc!r})")
    try:
        d = json.loads((out / f"optimize_{name}.json").read_text())
        f = (d.get("distributed") or {}).get("facts") or {}
        print(f"{name} optimize: step {f.get('step_s')}, exposed comm {f.get('exposed_communication_s')}, "
              f"no_sync bound {f.get('no_sync_bound_s')}, grads {f.get('grad_bytes')} B")
        for r in d["remedies"]:
            m = r["measured_speedup"]
            print(f"  {r['name']}: {r['status']}" + ("" if m is None else f" {m:.2f}x")
                  + f" ({(r['reason'] or '')[:90]})")
        best = d.get("best")
        print(f"  best: {best['name'] if best else None}")
    except Exception as exc:
        print(f"{name} optimize: no result ({exc!r})")
PYEOF
