#!/usr/bin/env bash
# Session n's GPU runs, one part per device call (600 s at most; carry .gpu_wheels):
#   OUT=$OUT bash benchmarks/session_n_gpu.sh lean    # issue 21: the lean decode step of
#        TinyLlama-1.1B b1 under Inductor settings not tried before (freezing, whose
#        patterns concatenate matmuls sharing an input; coordinate-descent radius 2;
#        looped reductions), beside the loop's own setting in the same sitting
#   OUT=$OUT bash benchmarks/session_n_gpu.sh train   # issue 24: the GPT-2 8x256 training
#        step's cold compile, whole step against region by region (train_compile_cost.py)
#   OUT=$OUT bash benchmarks/session_n_gpu.sh rows    # issue 24 rows at --budget-s 60
#        (ROWS="case ...", default bert_base_b32x128; SIDES=both adds the hand search)
part=${1:?lean, train or rows}
. benchmarks/gpu_preamble.sh session_n "$part"
case "$part" in
lean)
  timeout ${LEAN_S:-560} python3 benchmarks/lean_variants_gpu.py --out "$OUT/lean_settings.json" \
    --variants ${VARIANTS:-compile+math,compile+math@freeze,compile+math@radius2,compile+math@nopersist} \
    2>&1 | grep -v USDT | tail -20 ;;
train)
  for v in "eager" "regional default" "regional reduce-overhead" "step reduce-overhead"; do
    set -- $v
    export TORCHINDUCTOR_CACHE_DIR=$(mktemp -d) TRITON_CACHE_DIR=$(mktemp -d)
    echo "== $v"
    timeout 170 python3 benchmarks/train_compile_cost.py $1 --mode ${2:-default} 2>&1 \
      | grep -v USDT | tail -3
  done ;;
rows)
  timeout 60 python3 -m gobrrr calibrate --device cuda 2>&1 | grep -v USDT | tail -1
  BUDGET=60 SIDES=${SIDES:-gobrrr} timeout 560 bash benchmarks/optimize_models.sh \
    ${ROWS:-bert_base_b32x128} ;;
*) echo "unknown part $part"; exit 2 ;;
esac
if ls "$OUT"/models/*.log > /dev/null 2>&1; then
  tar czf "$OUT/models/logs.tgz" -C "$OUT/models" $(cd "$OUT/models" && ls *.log)
  rm -f "$OUT"/models/*.log
fi
