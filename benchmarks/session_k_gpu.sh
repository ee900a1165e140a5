#!/usr/bin/env bash
# The next GPU session's runs after session j, one part per device call (600 s at most;
# carry .gpu_wheels), in priority order:
#   OUT=$OUT bash benchmarks/session_k_gpu.sh tests   # the CUDA tests of the optimize
#        search and the compile child (test_optimize*.py, test_compile_child.py) (~2 min),
#        then issue 21's decode step under two Inductor settings not yet tried (~4 min)
#   OUT=$OUT bash benchmarks/session_k_gpu.sh opt60a  # issue 24: gobrrr at --budget-s 60
#        after the measuring child: the two misses first (ResNet-50 b256, the GPT-2
#        training step), then ConvNeXt-T and ViT
#   OUT=$OUT bash benchmarks/session_k_gpu.sh opt60b  # the other five rows
#   OUT=$OUT bash benchmarks/session_k_gpu.sh train   # the GPT-2 training row again, its
#        fused optimizer kept under the compiles (keep_when_neutral)
# Each row from a cold Inductor cache; the per-row logs come back in one tgz (a call
# returns 8 files at most).
set -uo pipefail
OUT=${OUT:-out}; mkdir -p "$OUT"
part=${1:?tests, opt60a, opt60b or train}
exec > >(tee "$OUT/session_k-$part.log") 2>&1
python3 -m pip install -q --no-deps --target /tmp/pylib .gpu_wheels/ijson-*.whl 2>&1 | tail -1
export PYTHONPATH="$PWD/src:/tmp/pylib${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
case "$part" in
tests) # (no CUDA test in these files: session k's call selected none; the opt60 rows are
       # the measuring child's run on the H200)
       timeout 300 python3 -m pytest -q -m cuda -p no:cacheprovider tests/test_optimize.py \
         tests/test_optimize_remedies.py tests/test_optimize_plan.py \
         tests/test_compile_child.py 2>&1 | grep -v USDT | tail -8
       timeout 330 python3 benchmarks/lean_variants_gpu.py --out "$OUT/lean_settings.json" \
         --variants compile+math@alldir,compile+math@nopersist 2>&1 | grep -v USDT | tail -30 ;;
opt60a) BUDGET=60 SIDES=gobrrr timeout 580 bash benchmarks/optimize_models.sh resnet50_b256 \
          gpt2_train_8x256 convnext_tiny_b64 vit_b16_b32 ;;
train) BUDGET=60 SIDES=gobrrr timeout 300 bash benchmarks/optimize_models.sh gpt2_train_8x256 ;;
opt60b) BUDGET=60 SIDES=gobrrr timeout 580 bash benchmarks/optimize_models.sh gpt2_1x1 \
          gpt2_8x512 resnet50_b1 bert_base_b32x128 mlp_16k ;;
*) echo "unknown part $part"; exit 2 ;;
esac
if ls "$OUT"/models/*.log > /dev/null 2>&1; then
  tar czf "$OUT/models/logs.tgz" -C "$OUT/models" $(cd "$OUT/models" && ls *.log)
  rm -f "$OUT"/models/*.log
fi
# summary.txt and the JSONs: at most 5 rows + logs.tgz + summary.txt + this log = 8 files
