#!/usr/bin/env bash
# Session am's device calls: the two CUDA-path warnings quieted (settings.tf32_advice_quiet,
# experiments.make_capturable's warn-once flag) and the CUDA compile prior of 13 s + 0.028 s
# per op (plan.COMPILE_BASE_S / COMPILE_PER_OP_S), checked on issue 24's rows.
#   OUT=... bash benchmarks/session_am_gpu.sh rows1|rows2
# rows1: the CUDA tests of the two warnings, then five rows (gobrrr's side, --budget-s 60);
# rows2: the other four rows. Each row's log is grepped for the two warnings after.
. benchmarks/gpu_preamble.sh session_am "$1"
warnings_in_logs() {
  for f in "$OUT"/models/*.log; do
    echo "$(basename "$f"): TF32 advice $(grep -c 'TensorFloat32 tensor cores' "$f"), "\
"uncaptured-step warning $(grep -c 'running without CUDA graph capture' "$f")"
  done
}
case "$1" in
  rows1)
    timeout 120 python3 -m pytest -q -p no:cacheprovider -m cuda tests/test_settings.py \
      tests/test_graph_replay_optim.py 2>&1 | tail -4
    BUDGET=60 SIDES=gobrrr bash benchmarks/optimize_models.sh gpt2_train_8x256 gpt2_8x512 \
      resnet50_b1 gpt2_1x1 resnet50_b256 ;;
  rows2)
    timeout 100 python3 -m pytest -q -p no:cacheprovider -m cuda tests/test_settings.py \
      -k tf32 2>&1 | tail -40 > "$OUT/tf32-test.txt"
    BUDGET=60 SIDES=gobrrr bash benchmarks/optimize_models.sh vit_b16_b32 mlp_16k \
      bert_base_b32x128 convnext_tiny_b64 ;;
  hand)
    shift; BUDGET=60 SIDES=hand bash benchmarks/optimize_models.sh "$@" ;;
esac
warnings_in_logs
(cd "$OUT" && tar czf "models-$1.tgz" models) && rm -rf "$OUT/models"
