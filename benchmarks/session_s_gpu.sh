#!/usr/bin/env bash
# Session s's GPU runs, one part per device call (600 s at most; carry .gpu_wheels):
#   OUT=$OUT [ROWS="case ..."] [VARIANTS=$'...'] bash benchmarks/session_s_gpu.sh PART
# PART: plain, nested (or all: both), timers, again, rows, rowtests.
# 1. plain: issue 23's eleven plain traces recorded again (plain_traces_gpu.py), each with
#    doctor after it and the step time a user's own loop logs (user_step_ms), the
#    sitting's calibration kept; packed into plain.tgz (8 files come back from a call).
# 2. nested: issue 24's training row: the GPT-2 training step (8x256, fused AdamW, bf16
#    autocast) compiled whole (reduce-overhead) from a cold Inductor cache, without and
#    with its GPT2Block as a nested compile region (train_compile_cost.py --nested),
#    each its own process: the cold compile's seconds and the step's ms.
# 3. timers (part `timers`): train_timer_check.py, the training step by a plain loop and
#    by doctor's timer around a profile() block, an analysis and a doctor run.
# 4. again (part `again`): the host-bound plain traces (training step, compiled chain)
#    three times each in one process, the user's loop timed before and after doctor.
# 5. rows (part `rows`, ROWS="case ..."): optimize at --budget-s 60 (optimize_models.sh,
#    gobrrr's side, cold caches) on the rows whose winner stacks reduce-overhead + freezing.
# 6. rowtests (part `rowtests`, ROWS=...): rows after the child starts before the diagnosis,
#    then every CUDA-marked test.
part=${1:-all}
. benchmarks/gpu_preamble.sh session_s "$part"
cold() {  # a fresh Inductor and Triton cache for one process
  local d; d=$(mktemp -d)
  TORCHINDUCTOR_CACHE_DIR=$d/inductor TRITON_CACHE_DIR=$d/triton "$@"
}
if [[ $part == all || $part == plain ]]; then
  timeout ${PLAIN_S:-300} python3 benchmarks/plain_traces_gpu.py "$OUT/plain" \
    2>&1 | grep -v USDT | cut -c1-400 | tail -30
  tar czf "$OUT/plain.tgz" -C "$OUT" plain && rm -rf "$OUT/plain"
fi
if [[ $part == all || $part == nested ]]; then
  variants=${VARIANTS:-$'step --nested\nstep\nstep --nested --mode default\nmodel --nested'}
  while read -r v; do  # one variant a line
    # shellcheck disable=SC2086
    cold timeout 120 python3 benchmarks/train_compile_cost.py $v \
      2> >(grep -v -e USDT -e Warn | tail -5 >&2) | tee -a "$OUT/nested.jsonl"
  done <<< "$variants"
fi
if [[ $part == timers ]]; then  # 3. why a plain loop and doctor's timer disagree
  timeout 300 python3 benchmarks/train_timer_check.py "$OUT/timers.jsonl" \
    2>&1 | grep -v -e USDT -e Warn | cut -c1-300 | tail -40
fi
if [[ $part == again ]]; then  # 4. the host-bound rows three times each, one process
  timeout 400 python3 benchmarks/plain_traces_gpu.py "$OUT/plain2" gpt2_train_4x256 \
    gpt2_train_4x256 gpt2_train_4x256 pointwise@default pointwise@default pointwise@default \
    2>&1 | grep -v USDT | cut -c1-400 | tail -30
  tar czf "$OUT/plain2.tgz" -C "$OUT" plain2 && rm -rf "$OUT/plain2"
fi
if [[ $part == rows ]]; then  # 5. budget-60 rows whose winner stacks reduce-overhead and
  # freezing, after fusion counts once in a stack (gains.combine, Gain.by_mechanism)
  timeout 60 python3 -m gobrrr calibrate --device cuda 2>&1 | grep -v USDT | tail -1
  BUDGET=60 SIDES=gobrrr timeout 540 bash benchmarks/optimize_models.sh ${ROWS:?cases}
  if ls "$OUT"/models/*.log > /dev/null 2>&1; then
    tar czf "$OUT/models/logs.tgz" -C "$OUT/models" $(cd "$OUT/models" && ls *.log)
    rm -f "$OUT"/models/*.log
  fi
fi
if [[ $part == rowtests ]]; then  # 6. the rows again after the background child starts
  # before the diagnosis, then every CUDA-marked test on this code
  timeout 60 python3 -m gobrrr calibrate --device cuda 2>&1 | grep -v USDT | tail -1
  BUDGET=60 SIDES=gobrrr timeout 200 bash benchmarks/optimize_models.sh ${ROWS:?cases}
  if ls "$OUT"/models/*.log > /dev/null 2>&1; then
    tar czf "$OUT/models/logs.tgz" -C "$OUT/models" $(cd "$OUT/models" && ls *.log)
    rm -f "$OUT"/models/*.log
  fi
  timeout ${TESTS_S:-160} python3 -m pytest -q -p no:cacheprovider -m cuda tests 2>&1 \
    | grep -v USDT | grep -e "^E " -e "^FAILED" -e passed -e failed -e error | tail -30
fi
