#!/usr/bin/env bash
# Session d's GPU runs (issue 21), one part per device call (600 s each at most):
#   OUT=$OUT bash benchmarks/session_d_gpu.sh lean|table
# lean:  benchmarks/lean_variants_gpu.py on TinyLlama-1.1B and Qwen2.5-0.5B (graph, compile,
#        compile+math: does Inductor's fused math attention take the per-layer mask and
#        cuDNN kernels out of the decode step?), the lean loop's CUDA tests, and
#        `doctor hf:tinyllama-1.1b --generate 64` timed (the 20 s asked).
# table: issue 21 item 7 rows for GPT-2 small at batch 1 and 8 (generate_table.py).
set -uo pipefail
OUT=${OUT:-out}; mkdir -p "$OUT"
part=${1:?lean or table}
exec > >(tee "$OUT/session_d-$part.log") 2>&1
python3 -m pip install -q --no-deps --target /tmp/pylib .gpu_wheels/ijson-*.whl 2>&1 | tail -1
export PYTHONPATH="$PWD/src:/tmp/pylib${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
stamp() { echo "=== $1 ($(date -u +%FT%TZ))"; }
quiet() { grep -v -e USDT -e Warn -e "Model config" -e "Failed to load"; }
case "$part" in
lean)
  stamp "lean_variants_gpu.py tinyllama-1.1b,qwen2.5-0.5b"
  timeout 330 python3 benchmarks/lean_variants_gpu.py --out "$OUT/lean_variants.json" \
    --models ${MODELS:-tinyllama-1.1b,qwen2.5-0.5b} 2>&1 | quiet
  python3 -c "
import json; [print(r) for r in json.load(open('$OUT/lean_variants.json'))]" 2>&1 | cut -c1-400
  stamp "cuda tests: the lean loop"
  timeout 120 python3 -m pytest -q -p no:cacheprovider -m cuda tests/test_generation_lean.py 2>&1 \
    | grep -v USDT | grep -e "^E " -e passed -e failed | tail -8
  stamp "doctor hf:tinyllama-1.1b --generate 64 --seq-len 128 --dtype bf16 (timed)"
  t0=$(date +%s%N)
  timeout 110 python3 -m gobrrr doctor hf:tinyllama-1.1b --generate 64 --seq-len 128 \
    --dtype bf16 --device cuda --json -q > "$OUT/doctor-generate-tinyllama.json" \
    2> "$OUT/doctor-generate-tinyllama.err" || echo "failed: $?"
  # stderr to its own file: a process substitution here inherited the JSON file as its
  # stdout (session e: a warning's last line landed after the report's JSON)
  quiet < "$OUT/doctor-generate-tinyllama.err" | tail -5
  echo "doctor wall ms: $(( ($(date +%s%N) - t0) / 1000000 ))"
  ls -la "$OUT"/doctor-generate-tinyllama.json
  ;;
table)
  python3 -m pip install -q --no-deps --target /tmp/pylib .gpu_wheels/torchao-*.whl 2>&1 | tail -1
  stamp "generate_table.py ${MODELS:-gpt2} ${BATCHES:-1,8}"
  timeout ${TABLE_S:-570} python3 benchmarks/generate_table.py --out "$OUT/generate.json" \
    --md "$OUT/generate.md" --models ${MODELS:-gpt2} --batches ${BATCHES:-1,8} \
    --optimize-budget-s ${OPT_BUDGET:-150} 2>&1 | quiet
  cat "$OUT/generate.md"
  ;;
*) echo "unknown part $part"; exit 2 ;;
esac
