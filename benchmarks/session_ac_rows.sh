#!/usr/bin/env bash
# Session ac's device calls (issue 24), on the code of 59c1d67 (the plan predicts later
# stacks from the quiet figure of a row timed again after the background compile):
#   bash benchmarks/session_ac_rows.sh rows    the rows not yet run on 549f2c8/59c1d67
#   bash benchmarks/session_ac_rows.sh train   the training row both sides, then the
#                                              CUDA-marked tests
# On an H200 the rows' gobrrr side is compared with the card's hand figures
# (optimize-budget60.md) and the hand side of the two rows whose hand spread decides them
# runs again beside; on an H100 both sides of the host-bound rows run (session aa's H100
# hand figures are a day old). Everything under $OUT, models tarred (8 files come back).
. benchmarks/gpu_preamble.sh session_ac "$1"
h200=0; nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200 && h200=1
case "$1" in
rows)
  if [ $h200 = 1 ]; then
    BUDGET=60 SIDES=gobrrr timeout "${ROWS_S:-300}" bash benchmarks/optimize_models.sh \
      resnet50_b256 bert_base_b32x128 convnext_tiny_b64 gpt2_8x512
    SIDES=hand timeout "${HAND_S:-200}" bash benchmarks/optimize_models.sh resnet50_b1 gpt2_1x1
  else
    BUDGET=60 SIDES=gobrrr timeout "${ROWS_S:-200}" bash benchmarks/optimize_models.sh \
      resnet50_b1 gpt2_1x1 vit_b16_b32
    SIDES=hand timeout "${HAND_S:-250}" bash benchmarks/optimize_models.sh resnet50_b1 gpt2_1x1
  fi ;;
train)
  BUDGET=60 timeout "${ROWS_S:-260}" bash benchmarks/optimize_models.sh gpt2_train_8x256
  timeout "${TESTS_S:-260}" python3 -m pytest -q -m cuda tests -p no:cacheprovider 2>&1 | tail -25 ;;
esac
cd "$OUT" && tar czf "models-$1.tgz" models && rm -rf models
