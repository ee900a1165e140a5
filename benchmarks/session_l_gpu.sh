#!/usr/bin/env bash
# Session l's GPU runs, one part per device call (600 s at most; carry .gpu_wheels):
#   OUT=$OUT bash benchmarks/session_l_gpu.sh cost    # issue 24: where the GPT-2 training
#        step's compile seconds go (train_compile_cost.py: whole step against model only,
#        each from a cold cache) and the compile child's own wall time for the same stack
#   OUT=$OUT bash benchmarks/session_l_gpu.sh doctors # the doctor reports (JSON) behind
#        issue 24's two prediction misses (ResNet-50 b256, GPT-2 8x512), fp32 and bf16
#   OUT=$OUT bash benchmarks/session_l_gpu.sh compiled  # the same two rows in bf16,
#        eager and compiled with freezing (prediction_targets.py)
#   OUT=$OUT BUDGET=120 bash benchmarks/session_l_gpu.sh train   # the GPT-2 training
#        row at --budget-s $BUDGET (60 by default), the ceilings calibrated first (as in
#        a table sitting, where the rows after the first find them cached)
set -uo pipefail
OUT=${OUT:-out}; mkdir -p "$OUT"
part=${1:?cost, doctors, compiled or train}
exec > >(tee "$OUT/session_l-$part.log") 2>&1
python3 -m pip install -q --no-deps --target /tmp/pylib .gpu_wheels/ijson-*.whl 2>&1 | tail -1
export PYTHONPATH="$PWD/src:/tmp/pylib${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
cold() {  # cold CMD...: run CMD from an empty Inductor and Triton cache, its wall time
  local cache; cache=$(mktemp -d); local t0; t0=$(date +%s.%N)
  TORCHINDUCTOR_CACHE_DIR="$cache/inductor" TRITON_CACHE_DIR="$cache/triton" "$@" 2>&1 \
    | grep -v USDT | grep -E '^\{|Error|error' | tail -3
  echo "wall_s $(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN{printf "%.1f", b-a}') : $*"; rm -rf "$cache"
}
case "$part" in
cost)
  cold python3 benchmarks/train_compile_cost.py step
  cold python3 benchmarks/train_compile_cost.py model
  spec='{"target":"hf:gpt2","device":"cuda","batch_size":8,"options":{"seq_len":256,"image_size":null,"dtype":null,"train":true},"remedies":["fused_optimizer","bf16_autocast","compile_reduce_overhead"]}'
  cold python3 -m gobrrr.remedies.compile_child_main "$spec"
  cold python3 benchmarks/train_compile_cost.py step --mode default ;;
train)
  timeout 120 python3 -m gobrrr calibrate --device cuda 2>&1 | grep -v USDT | tail -3
  BUDGET=${BUDGET:-60} SIDES=gobrrr timeout 400 bash benchmarks/optimize_models.sh gpt2_train_8x256 ;;
doctors)  # the budgets behind issue 24's two prediction misses, fp32 (what optimize
  # diagnoses) and cast to bf16 (what its compile candidate starts from)
  timeout 120 python3 -m gobrrr calibrate --device cuda 2>&1 | grep -v USDT | tail -1
  for dt in fp32 bf16; do
    timeout 120 python3 -m gobrrr doctor torchvision:resnet50 --batch-size 256 --dtype $dt \
      --json > "$OUT/doctor-resnet50_b256-$dt.json" 2> >(grep -v USDT | tail -2 >&2)
    timeout 120 python3 -m gobrrr doctor hf:gpt2 --batch-size 8 --seq-len 512 --dtype $dt \
      --json > "$OUT/doctor-gpt2_8x512-$dt.json" 2> >(grep -v USDT | tail -2 >&2)
  done
  gzip -9 "$OUT"/doctor-*.json; ls -la "$OUT" ;;
compiled)  # the same two rows in bf16 (ResNet-50 channels_last), inference_mode, eager
  # and compiled with freezing (prediction_targets.py): where compile's time goes
  timeout 60 python3 -m gobrrr calibrate --device cuda 2>&1 | grep -v USDT | tail -1
  for t in resnet50_b256_eager resnet50_b256_compiled gpt2_8x512_eager gpt2_8x512_compiled; do
    timeout 150 python3 -m gobrrr doctor benchmarks/prediction_targets.py:$t --json \
      > "$OUT/doctor-$t.json" 2> >(grep -v USDT | tail -3 >&2)
  done
  gzip -9 "$OUT"/doctor-*.json; ls -la "$OUT" ;;
*) echo "unknown part $part"; exit 2 ;;
esac
if ls "$OUT"/models/*.log > /dev/null 2>&1; then
  tar czf "$OUT/models/logs.tgz" -C "$OUT/models" $(cd "$OUT/models" && ls *.log)
  rm -f "$OUT"/models/*.log
fi
