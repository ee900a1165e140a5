#!/usr/bin/env bash
# Session r's GPU runs, one part per device call (600 s at most; carry .gpu_wheels):
#   OUT=$OUT bash benchmarks/session_r_gpu.sh parts  # issue 24 item 4: the parts of each
#        bf16 prediction against the bf16 call as it runs (precision_parts.py, 5 models)
#   OUT=$OUT bash benchmarks/session_r_gpu.sh only   # the precision remedies alone
#        (`optimize --only bf16_autocast,bf16_cast,tf32`, budget 60, gobrrr's A/B timer):
#        predicted against measured on the five models, each its own process
#   ROWS="case ..." OUT=$OUT bash benchmarks/session_r_gpu.sh rows  # optimize at
#        --budget-s 60 on the table's rows (optimize_models.sh, gobrrr's side, cold caches)
# (session q's insearch part, run first this session: session_q_gpu.sh insearch)
part=${1:?parts, only or rows}
. benchmarks/gpu_preamble.sh session_r "$part"
cold() {  # a fresh Inductor and Triton cache for one process
  local d; d=$(mktemp -d)
  TORCHINDUCTOR_CACHE_DIR=$d/inductor TRITON_CACHE_DIR=$d/triton "$@"
}
case "$part" in
parts)
  timeout 500 python3 benchmarks/precision_parts.py 2> >(grep -v -e USDT -e Warn | tail -20 >&2) \
    | tee "$OUT/precision_parts.jsonl" | cut -c1-200 ;;
only)
  timeout 60 python3 -m gobrrr calibrate --device cuda 2>&1 | grep -v USDT | tail -1
  while read -r name target args; do
    # shellcheck disable=SC2086
    cold timeout 110 python3 -m gobrrr optimize "$target" $args --budget-s 60 \
      --only bf16_autocast,bf16_cast,tf32 --json > "$OUT/only-$name.json" \
      2> >(grep -v -e USDT -e Warn | tail -3 >&2)
    python3 - "$OUT/only-$name.json" "$name" <<'EOF'
import json, sys
d = json.load(open(sys.argv[1]))
for r in d["remedies"]:
    if r.get("measured_speedup") is not None:
        print(f"{sys.argv[2]:18} {r['name']:15} predicted {r.get('predicted_speedup') or 0:.2f}x "
              f"measured {r['measured_speedup']:.2f}x {r['status']}")
EOF
  done <<'CASES'
gpt2_8x512 hf:gpt2 --batch-size 8 --seq-len 512
vit_b16_b32 torchvision:vit_b_16 --batch-size 32
mlp_16k benchmarks/optimize_targets.py:mlp_16k --batch-size 16384
resnet50_b256 torchvision:resnet50 --batch-size 256
gpt2_train_8x256 hf:gpt2 --batch-size 8 --seq-len 256 --train
CASES
  ;;
rows)
  timeout 60 python3 -m gobrrr calibrate --device cuda 2>&1 | grep -v USDT | tail -1
  BUDGET=60 SIDES=gobrrr timeout 540 bash benchmarks/optimize_models.sh ${ROWS:?cases} ;;
*) echo "unknown part $part"; exit 2 ;;
esac
if ls "$OUT"/models/*.log > /dev/null 2>&1; then
  tar czf "$OUT/models/logs.tgz" -C "$OUT/models" $(cd "$OUT/models" && ls *.log)
  rm -f "$OUT"/models/*.log
fi
