#!/usr/bin/env bash
# The next GPU session's runs after session f, one part per device call (600 s at most;
# carry .gpu_wheels), in priority order:
#   OUT=$OUT bash benchmarks/session_g_gpu.sh opt60a   # issue 24: gobrrr at --budget-s 60, 4 rows
#   OUT=$OUT bash benchmarks/session_g_gpu.sh opt60b   #           the other 5 rows
#   OUT=$OUT bash benchmarks/session_g_gpu.sh hand     # issue 24: the missing hand sides
#   OUT=$OUT bash benchmarks/session_g_gpu.sh mem CASE # issue 26: one memory_table.py case
# opt60a/b re-run gobrrr's side after session f's changes (the stack's compiles in one tier
# by predicted gain, freezing's folded ops through reused storages, ViT's zero head drawn
# again); hand: ResNet-50 b256, ViT-B/16 (void in session f) and the GPT-2 training step
# (only partial so far). Files: under $OUT/models (logs removed: the files-per-call limit).
set -uo pipefail
OUT=${OUT:-out}; mkdir -p "$OUT"
part=${1:?opt60a, opt60b, hand or mem}
exec > >(tee "$OUT/session_g-$part.log") 2>&1
python3 -m pip install -q --no-deps --target /tmp/pylib .gpu_wheels/*.whl 2>&1 | tail -1
export PYTHONPATH="$PWD/src:/tmp/pylib${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
case "$part" in
opt60a) BUDGET=60 SIDES=gobrrr bash benchmarks/optimize_models.sh gpt2_1x1 gpt2_8x512 \
          resnet50_b1 bert_base_b32x128 ;;
opt60b) BUDGET=60 SIDES=gobrrr bash benchmarks/optimize_models.sh resnet50_b256 \
          gpt2_train_8x256 vit_b16_b32 convnext_tiny_b64 mlp_16k ;;
hand) SIDES=hand timeout 580 bash benchmarks/optimize_models.sh vit_b16_b32 resnet50_b256 \
        gpt2_train_8x256 ;;
mem) timeout 580 python3 benchmarks/memory_table.py --out "$OUT/memory" --cases "${2:?case}" \
       --timeout-s 560 ;;
*) echo "unknown part $part"; exit 2 ;;
esac
rm -f "$OUT"/models/*.log
