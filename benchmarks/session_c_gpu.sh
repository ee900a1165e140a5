#!/usr/bin/env bash
# This session's GPU runs, one part per device call (600 s each at most):
#   OUT=$OUT bash benchmarks/session_c_gpu.sh lean|table|variants|memseq
# lean:   benchmarks/lean_gpu.py: HF generate, generate with the static cache, and the
#         lean decode loop (eager, CUDA graph, compiled) on TinyLlama-1.1B, GPT-2 small and
#         Qwen2.5-0.5B, bf16, batch 1 and 8 (issue 21: where the 40% of the bound is);
# table:  issue 21 item 7: the hand search and `gobrrr optimize --generate` per row;
# variants: benchmarks/lean_variants_gpu.py (the lean loop's variants, kernels a step);
# memseq: `gobrrr memory --fit-seq-len` on CUDA (GPT-2 small training, TinyLlama
#         inference), each check in a fresh process.
# The next session (each line one device call, ~600 s):
#   MODELS=tinyllama-1.1b,qwen2.5-0.5b ... variants   (then the cuda tests inside table)
#   MODELS=tinyllama-1.1b,gpt2 BATCHES=1 table;  MODELS=gpt2,tinyllama-1.1b BATCHES=8 table
#   MODELS=qwen2.5-0.5b BATCHES=1,8 TABLE_S=540 table;  memseq
set -uo pipefail
OUT=${OUT:-out}; mkdir -p "$OUT"
part=${1:?lean, table, variants or memseq}
exec > >(tee "$OUT/session_c-$part.log") 2>&1
python3 -m pip install -q --no-deps --target /tmp/pylib .gpu_wheels/ijson-*.whl 2>&1 | tail -1
export PYTHONPATH="$PWD/src:/tmp/pylib${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
stamp() { echo "=== $1 ($(date -u +%FT%TZ))"; }
case "$part" in
lean)
  stamp "lean_gpu.py"
  timeout 570 python3 benchmarks/lean_gpu.py --out "$OUT/lean_gpu.json" \
    --models tinyllama-1.1b,gpt2,qwen2.5-0.5b --batches 1,8 --budget-s 500 2>&1 \
    | grep -v -e USDT -e Warn -e "Model config"
  ;;
table)
  python3 -m pip install -q --no-deps --target /tmp/pylib .gpu_wheels/torchao-*.whl 2>&1 | tail -1
  stamp "cuda tests: the lean loop and the graph experiment"
  timeout 150 python3 -m pytest -q -p no:cacheprovider -m cuda tests/test_generation_lean.py 2>&1 \
    | grep -v USDT | grep -e "^E " -e passed -e failed | tail -8
  stamp "generate_table.py ${MODELS:-tinyllama-1.1b} ${BATCHES:-1}"
  timeout ${TABLE_S:-420} python3 benchmarks/generate_table.py --out "$OUT/generate.json" \
    --md "$OUT/generate.md" --models ${MODELS:-tinyllama-1.1b} --batches ${BATCHES:-1} \
    --optimize-budget-s ${OPT_BUDGET:-200} 2>&1 | grep -v -e USDT -e Warn -e "Model config" -e "Failed to load"
  cat "$OUT/generate.md"
  ;;
variants)
  stamp "lean_variants_gpu.py"
  timeout 420 python3 benchmarks/lean_variants_gpu.py --out "$OUT/lean_variants.json" \
    --models ${MODELS:-tinyllama-1.1b,qwen2.5-0.5b} 2>&1 | grep -v -e USDT -e Warn -e "Model config"
  python3 -c "
import json; [print(r['workload'], r['variant'], r.get('top_kernels_us')) for r in json.load(open('$OUT/lean_variants.json'))]"
  ;;
memseq)
  stamp "memory hf:gpt2 --train --batch-size 8 --seq-len 128 --fit-seq-len (CUDA)"
  timeout 280 python3 -m gobrrr memory hf:gpt2 --train --batch-size 8 --seq-len 128 \
    --device cuda --fit-seq-len --json -q > "$OUT/memseq-gpt2-train.json" || echo "failed: $?"
  stamp "memory hf:tinyllama-1.1b --batch-size 1 --seq-len 256 --dtype bf16 --fit-seq-len"
  timeout 280 python3 -m gobrrr memory hf:tinyllama-1.1b --batch-size 1 --seq-len 256 \
    --dtype bf16 --device cuda --fit-seq-len --json -q > "$OUT/memseq-tinyllama.json" \
    || echo "failed: $?"
  python3 - "$OUT" <<'PY'
import glob, json, sys
for f in sorted(glob.glob(f"{sys.argv[1]}/memseq-*.json")):
    try:
        s = json.load(open(f))["fit_seq_len"]
    except Exception as exc:
        print(f, "unreadable", exc); continue
    print(f.split("/")[-1], s["seq_lens"], s["peaks_bytes"], s["predicted_max_seq_len"],
          s["limited_by"], s.get("checked"))
PY
  ;;
*) echo "unknown part $part"; exit 2 ;;
esac
