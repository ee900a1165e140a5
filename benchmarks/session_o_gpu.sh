#!/usr/bin/env bash
# Session o's GPU runs, one part per device call (600 s at most; carry .gpu_wheels):
#   OUT=$OUT bash benchmarks/session_o_gpu.sh forms   # issue 21: the batch-1 GEMV forms
#        under Inductor (gemv_forms_gpu.py): cuBLAS, coordinate descent, split-K by hand
#   OUT=$OUT bash benchmarks/session_o_gpu.sh lean    # issue 21: the lean decode step of
#        TinyLlama-1.1B b1 with split-K linears or realized linear inputs beside the
#        loop's own (VARIANTS=, LEAN_S=)
#   OUT=$OUT bash benchmarks/session_o_gpu.sh table   # issue 21: the lean loop's CUDA tests,
#        then the TinyLlama-1.1B b1 row of generate_table.py (hand search, optimize, doctor)
#   OUT=$OUT bash benchmarks/session_o_gpu.sh pcost   # issue 23: the profiler's host cost
#        of compiled calls (Triton launches) against eager ones (profiler_cost.py compiled)
part=${1:?forms, lean, table or pcost}
. benchmarks/gpu_preamble.sh session_o "$part"
case "$part" in
forms)
  timeout ${FORMS_S:-560} python3 benchmarks/gemv_forms_gpu.py --out "$OUT/gemv_forms.json" \
    2>&1 | grep -v USDT | tail -30 ;;
lean)
  timeout ${LEAN_S:-560} python3 benchmarks/lean_variants_gpu.py --out "$OUT/lean_split.json" \
    --variants ${VARIANTS:-compile+math,compile+math@split4down,compile+math@split4} \
    2>&1 | grep -v USDT | tail -20 ;;
table)
  timeout 150 python3 -m pytest -q -p no:cacheprovider -m cuda tests/test_generation_lean.py 2>&1 \
    | grep -v USDT | grep -e "^E " -e passed -e failed | tail -8
  timeout ${TABLE_S:-420} python3 benchmarks/generate_table.py --out "$OUT/generate.json" \
    --md "$OUT/generate.md" --models ${MODELS:-tinyllama-1.1b} --batches ${BATCHES:-1} \
    --optimize-budget-s ${OPT_BUDGET:-200} 2>&1 \
    | grep -v -e USDT -e Warn -e "Model config" -e "Failed to load"
  cat "$OUT/generate.md" ;;
pcost)
  for i in 1 2; do timeout 120 python3 benchmarks/profiler_cost.py compiled 2>&1 | grep -v USDT; done ;;
*) echo "unknown part $part"; exit 2 ;;
esac
