#!/usr/bin/env bash
# Session t's GPU runs, one part per device call (600 s at most; carry .gpu_wheels):
#   OUT=$OUT [TAG=session_u] [ROWS="case ..."] bash benchmarks/session_t_gpu.sh PART
# PART:
# 1. grads: are a training step's gradients right with its repeated blocks as nested
#    compile regions (nested_grad_check.py; on the CPU's torch 2.13 the toy's first
#    block's were wrong)? The toy and GPT-2, each without and with the region, each its
#    own process from a cold cache.
# 2. rows (ROWS="case ..."): optimize at --budget-s 60 (optimize_models.sh, gobrrr's side,
#    cold caches) after the background child starts at the CLI's start (a training
#    step's compiling its guess at once: remedies/speculation.py), then every CUDA-marked
#    test (TESTS_S seconds; 0: none).
part=${1:?part}
. benchmarks/gpu_preamble.sh "${TAG:-session_t}" "$part"
cold() {  # a fresh Inductor and Triton cache for one process
  local d; d=$(mktemp -d)
  TORCHINDUCTOR_CACHE_DIR=$d/inductor TRITON_CACHE_DIR=$d/triton "$@"
}
if [[ $part == grads ]]; then
  for what in ${WHAT:-toy gpt2}; do
    for nested in "" --nested; do
      # shellcheck disable=SC2086
      cold timeout 150 python3 benchmarks/nested_grad_check.py $what $nested --device cuda \
        2> >(grep -v -e USDT -e Warn | tail -3 >&2) | tee -a "$OUT/nested_grads.jsonl"
    done
  done
fi
if [[ $part == rows ]]; then
  timeout 60 python3 -m gobrrr calibrate --device cuda 2>&1 | grep -v USDT | tail -1
  BUDGET=60 SIDES=gobrrr timeout ${ROWS_S:-400} bash benchmarks/optimize_models.sh ${ROWS:?cases}
  if ls "$OUT"/models/*.log > /dev/null 2>&1; then
    tar czf "$OUT/models/logs.tgz" -C "$OUT/models" $(cd "$OUT/models" && ls *.log)
    rm -f "$OUT"/models/*.log
  fi
  if [[ ${TESTS_S:-160} != 0 ]]; then
    timeout ${TESTS_S:-160} python3 -m pytest -q -p no:cacheprovider -m cuda tests 2>&1 \
      | grep -v USDT | grep -e "^E " -e "^FAILED" -e passed -e failed -e error | tail -30
  fi
fi
