#!/usr/bin/env bash
# Session an's device calls: the first GPU run of the background child's compiled
# combination as an option of its own (plan.SearchState.compiled_aside,
# ChildProber.compiled_aside / holds), the TF32 test's fix, and GPT-2 1x1's spread.
#   OUT=... bash benchmarks/session_an_gpu.sh rows1|rows2|hand [CASES...]
# rows1: the CUDA test of the TF32 advice, then five rows (gobrrr's side, --budget-s 60);
# rows2: the other four rows; hand CASES: the hand side, then gpt2_1x1_spread.py;
# hand2: see its case.
# Each row's log is grepped after for the child's combination and the compile estimates.
. benchmarks/gpu_preamble.sh session_an "$1"
part=$1
child_lines() {
  for f in "$OUT"/models/gobrrr_*.log; do
    [ -e "$f" ] || continue
    echo "== $(basename "$f")"
    grep -E "background child|compile: estimated|waiting for its compile" "$f" | head -12
  done
}
case "$1" in
  rows1)
    timeout 150 python3 -m pytest -q -p no:cacheprovider -m cuda tests/test_settings.py \
      2>&1 | tail -30 > "$OUT/settings-test.txt"; tail -3 "$OUT/settings-test.txt"
    BUDGET=60 SIDES=gobrrr bash benchmarks/optimize_models.sh gpt2_train_8x256 gpt2_8x512 \
      resnet50_b1 gpt2_1x1 resnet50_b256 ;;
  rows2)
    BUDGET=60 SIDES=gobrrr bash benchmarks/optimize_models.sh vit_b16_b32 mlp_16k \
      bert_base_b32x128 convnext_tiny_b64 ;;
  pred)  # after savings.replay took the replay's own time: the two host-bound rows
    BUDGET=60 SIDES=gobrrr bash benchmarks/optimize_models.sh resnet50_b1 gpt2_1x1 ;;
  hand2)  # an H100: three more rows' hand sides; an H200: both sides of the two rows
    if nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H100; then
      SIDES=hand bash benchmarks/optimize_models.sh resnet50_b256 convnext_tiny_b64 \
        bert_base_b32x128
    else
      BUDGET=60 bash benchmarks/optimize_models.sh gpt2_1x1 resnet50_b1
    fi ;;
  hand)
    shift; BUDGET=60 SIDES=hand bash benchmarks/optimize_models.sh "$@"
    cache=$(mktemp -d)
    TORCHINDUCTOR_CACHE_DIR="$cache/inductor" TRITON_CACHE_DIR="$cache/triton" \
      timeout 200 python3 benchmarks/gpt2_1x1_spread.py 2>&1 | grep -v Warning ;;
esac
child_lines
(cd "$OUT" && tar czf "models-$part.tgz" models) && rm -rf "$OUT/models"
