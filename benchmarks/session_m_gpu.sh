#!/usr/bin/env bash
# Session m's GPU runs, one part per device call (600 s at most; carry .gpu_wheels):
#   OUT=$OUT bash benchmarks/session_m_gpu.sh probe     # issue 24: GPT-2's LM head GEMM
#        padded and compiled (pad_probe.py); issue 23: the profiler's cost per host event
#        with CUDA activity and GPT-2 8x512's host issue bare and profiled
#        (profiler_cost.py cuda); issue 24: the ResNet-50 b256 bf16 channels_last
#        inference call eager and compiled with freezing, doctored (prediction_targets.py)
#   OUT=$OUT bash benchmarks/session_m_gpu.sh rows      # issue 24's two prediction rows
#        (GPT-2 8x512, ResNet-50 b256) at --budget-s 60 on this code, after the CUDA tests
#        of the GEMM probe; ROWS="case ..." (optimize_models.py) picks other rows,
#        SIDES=both runs the hand search of each row first, in the same sitting
#   OUT=$OUT bash benchmarks/session_m_gpu.sh plain     # issue 23: GPT-2 8x512, its
#        training step and the compiled pointwise chain recorded again the plain way,
#        analyzed beside doctor (plain_traces_gpu.py): does the slow traced host recur?
part=${1:?probe, rows or plain}
. benchmarks/gpu_preamble.sh session_m "$part"
case "$part" in
probe)
  echo "== pad_probe"; timeout 150 python3 benchmarks/pad_probe.py 2>&1 | grep -v USDT | tail -20
  echo "== profiler_cost cuda"; timeout 200 python3 benchmarks/profiler_cost.py cuda 2>&1 \
    | grep -v USDT | tail -12
  timeout 60 python3 -m gobrrr calibrate --device cuda 2>&1 | grep -v USDT | tail -1
  for t in resnet50_b256_eager resnet50_b256_compiled gpt2_8x512_compiled; do
    echo "== doctor $t"
    timeout 150 python3 -m gobrrr doctor benchmarks/prediction_targets.py:$t --json \
      > "$OUT/doctor-$t.json" 2> >(grep -v USDT | tail -4 >&2)
  done
  gzip -9 "$OUT"/doctor-*.json; ls -la "$OUT" ;;
rows)
  timeout 120 python3 -m pytest -q -m cuda tests/test_gemm_probe.py tests/test_layout_predict.py \
    -p no:cacheprovider 2>&1 | tail -3
  timeout 60 python3 -m gobrrr calibrate --device cuda 2>&1 | grep -v USDT | tail -1
  BUDGET=60 SIDES=${SIDES:-gobrrr} timeout 540 bash benchmarks/optimize_models.sh \
    ${ROWS:-gpt2_8x512 resnet50_b256} ;;
plain)
  timeout ${PLAIN_S:-500} python3 benchmarks/plain_traces_gpu.py "$OUT/plain" gpt2_8x512 gpt2_train_4x256 pointwise@default \
    2>&1 | grep -v USDT | tail -30 ;;
*) echo "unknown part $part"; exit 2 ;;
esac
if ls "$OUT"/models/*.log > /dev/null 2>&1; then
  tar czf "$OUT/models/logs.tgz" -C "$OUT/models" $(cd "$OUT/models" && ls *.log)
  rm -f "$OUT"/models/*.log
fi
