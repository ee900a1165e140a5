#!/usr/bin/env bash
# Session ab's last device call (issue 24), on the search that times its best row again
# once the background compile has ended (remedies/quiet.py): gobrrr's side of the rows
# whose winner a host-bound eager may inflate first (ResNet-50 b1, GPT-2 1x1, ViT-B/16:
# their hand searches ran on both cards, the H100's in session aa), then the others on
# an H200 (the hand figures: optimize-budget60.md). Everything under $OUT, the models
# folder tarred (the device tool returns at most 8 files).
. benchmarks/gpu_preamble.sh session_ab rows2
rows="resnet50_b1 gpt2_1x1 vit_b16_b32"
if nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200; then
  rows="$rows mlp_16k resnet50_b256 bert_base_b32x128 convnext_tiny_b64"
fi
# shellcheck disable=SC2086
BUDGET=60 SIDES=gobrrr timeout "${ROWS_S:-480}" bash benchmarks/optimize_models.sh $rows
cd "$OUT" && tar czf models.tgz models && rm -rf models
