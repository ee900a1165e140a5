#!/usr/bin/env bash
# The next GPU session's runs (issues 21 and 26 after session e), one part per device call
# (600 s each at most; carry .gpu_wheels):
#   OUT=$OUT bash benchmarks/session_f_gpu.sh gen|memory
# gen:    doctor --generate alone on the four 1B-class rows (diagnose_s and report bytes
#         after session e's batch-experiment and JSON changes: the 20 s and 2 MB),
#         torchao int8/int4 through optimize's own code (int4 never ran on a GPU yet), and
#         the lean step under coordinate_descent_check_all_directions (the 40%).
# memory: benchmarks/memory_remedies_gpu.py (GPT-2 small 8 x 512: activation
#         checkpointing applied, verified, measured; issue 26's done-when).
set -uo pipefail
OUT=${OUT:-out}; mkdir -p "$OUT"
part=${1:?gen or memory}
exec > >(tee "$OUT/session_f-$part.log") 2>&1
python3 -m pip install -q --no-deps --target /tmp/pylib .gpu_wheels/*.whl 2>&1 | tail -1
export PYTHONPATH="$PWD/src:/tmp/pylib${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
stamp() { echo "=== $1 ($(date -u +%FT%TZ))"; }
quiet() { grep -v -e USDT -e Warn -e "Model config" -e "Failed to load" -e warn; }
case "$part" in
gen)
  stamp "generate_doctor_gpu.py"
  timeout 220 python3 benchmarks/generate_doctor_gpu.py --out "$OUT/doctor_rows.json" \
    --rows tinyllama-1.1b:1,tinyllama-1.1b:8,qwen2.5-0.5b:1,qwen2.5-0.5b:8 2>&1 | quiet
  stamp "quant_check_gpu.py tinyllama-1.1b b1"
  timeout 200 python3 benchmarks/quant_check_gpu.py --out "$OUT/quant.json" 2>&1 | quiet \
    | cut -c1-300
  stamp "lean_variants_gpu.py compile+math@alldir"
  timeout 150 python3 benchmarks/lean_variants_gpu.py --out "$OUT/lean_alldir.json" \
    --models tinyllama-1.1b --variants compile+math@alldir 2>&1 | quiet | cut -c1-400
  ;;
memory)
  stamp "memory_remedies_gpu.py"
  timeout 560 python3 benchmarks/memory_remedies_gpu.py "$OUT/memory" 2>&1 | quiet | tail -40
  ;;
regen)  # after the batch experiment's warm-up came back
  stamp "generate_doctor_gpu.py"
  timeout 200 python3 benchmarks/generate_doctor_gpu.py --out "$OUT/doctor_rows.json" \
    --rows tinyllama-1.1b:1,qwen2.5-0.5b:1,qwen2.5-0.5b:8 2>&1 | quiet
  stamp "optimize --budget-s 60, gobrrr side"
  BUDGET=60 SIDES=gobrrr bash benchmarks/optimize_models.sh ${CASES:-gpt2_1x1 resnet50_b1}
  ;;
opt60)  # issue 24's budget-60 rows, gobrrr side; CASES names them
  BUDGET=60 SIDES=gobrrr bash benchmarks/optimize_models.sh $CASES
  ;;
*) echo "unknown part $part"; exit 2 ;;
esac
