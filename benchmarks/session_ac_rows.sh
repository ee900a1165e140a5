#!/usr/bin/env bash
# Session ac's device calls (issue 24), on the search whose plan measures under the CUDA
# -graph capture a remedy a host-bound eager hid (plan.replay_probes) and predicts later
# stacks from the quiet figure of a row timed again after the background compile:
#   bash benchmarks/session_ac_rows.sh rows    ResNet-50 b1 and GPT-2 1x1 both sides,
#                                              then gobrrr's side of two more rows
#   bash benchmarks/session_ac_rows.sh more    gobrrr's side of three more rows
#   bash benchmarks/session_ac_rows.sh train   the training row both sides, then the
#                                              CUDA-marked tests
# The gobrrr sides alone are read against the card's hand figures (optimize-budget60.md).
# Everything under $OUT, models tarred (8 files come back).
. benchmarks/gpu_preamble.sh session_ac "$1"
h200=0; nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200 && h200=1
# the models folder tarred after each step: a call stopped at its limit still brings back
# what the steps before ran (the device tool returns at most 8 files)
pack() { (cd "$OUT" && tar czf "models-$1.tgz" models); }
case "$1" in
rows)  # the host-bound rows both sides first (remedies a host-bound eager hid, plan.py)
  BUDGET=60 timeout "${ROWS_S:-330}" bash benchmarks/optimize_models.sh resnet50_b1 gpt2_1x1
  pack "$1"
  if [ $h200 = 1 ]; then
    BUDGET=60 SIDES=gobrrr timeout "${MORE_S:-170}" bash benchmarks/optimize_models.sh \
      gpt2_8x512 resnet50_b256
  else
    BUDGET=60 SIDES=gobrrr timeout "${MORE_S:-170}" bash benchmarks/optimize_models.sh vit_b16_b32
  fi ;;
more)  # the other H200 rows not yet run on the quiet re-timing
  BUDGET=60 SIDES=gobrrr timeout "${ROWS_S:-200}" bash benchmarks/optimize_models.sh \
    bert_base_b32x128 convnext_tiny_b64 vit_b16_b32 ;;
train)
  BUDGET=60 timeout "${ROWS_S:-260}" bash benchmarks/optimize_models.sh gpt2_train_8x256
  pack "$1"
  timeout "${TESTS_S:-260}" python3 -m pytest -q -m cuda tests -p no:cacheprovider 2>&1 | tail -25 ;;
esac
pack "$1" && rm -rf "$OUT/models"
