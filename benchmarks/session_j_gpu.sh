#!/usr/bin/env bash
# Session j's GPU runs (2026-12-03), one part per device call (600 s at most; carry
# .gpu_wheels). Session i ran the same parts on 17aa9a3 but its machine's files were lost
# with the session (its figures are in session-2026-12-02i/README.md); these re-run them
# on the landed code so that the raw rows are committed:
#   OUT=$OUT bash benchmarks/session_j_gpu.sh run      # the CUDA tests of session h's
#        changes, then issue 22: the ResNet-50 script with a slow DataLoader under gobrrr run
#   OUT=$OUT bash benchmarks/session_j_gpu.sh opt60b   # issue 24: gobrrr at --budget-s 60,
#        the five rows session i did not reach (background compile child, 17aa9a3)
#   OUT=$OUT bash benchmarks/session_j_gpu.sh opt60a   # the other four rows, then issue 21's
#        doctor --generate 64 rows (TinyLlama and Qwen2.5-0.5B, batch 1 and 8)
#   OUT=$OUT bash benchmarks/session_j_gpu.sh after    # after the change the first three
#        showed (the background child compiles the predicted stack; its combination runs
#        instead of a probe that no longer fits): opt60b's five rows, then ResNet-50 b1
#        and GPT-2 1x1
set -uo pipefail
OUT=${OUT:-out}; mkdir -p "$OUT"
part=${1:?run, opt60a, opt60b or after}
exec > >(tee "$OUT/session_j-$part.log") 2>&1
python3 -m pip install -q --no-deps --target /tmp/pylib .gpu_wheels/ijson-*.whl 2>&1 | tail -1
export PYTHONPATH="$PWD/src:/tmp/pylib${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
gendoc() {
  mkdir -p "$OUT/gendoc"
  for row in tinyllama-1.1b:1 tinyllama-1.1b:8 qwen2.5-0.5b:1 qwen2.5-0.5b:8; do
    m=${row%:*}; b=${row#*:}; f="$OUT/gendoc/doctor-$m-b$b.json"
    /usr/bin/time -f "$m b$b doctor wall %e s" timeout 100 python3 -m gobrrr doctor "hf:$m" \
      --generate 64 --batch-size "$b" --seq-len 128 --dtype bf16 --device cuda --json \
      -q > "$f" 2> "$OUT/gendoc/doctor-$m-b$b.err" || tail -3 "$OUT/gendoc/doctor-$m-b$b.err"
    tail -1 "$OUT/gendoc/doctor-$m-b$b.err"
    [ -s "$f" ] && python3 -c "
import json, os; d = json.load(open('$f'))
print('$m b$b: diagnose_s', d.get('diagnose_s'), 'report', os.path.getsize('$f'), 'bytes')"
  done
  tar czf "$OUT/gendoc.tgz" -C "$OUT" gendoc && rm -rf "$OUT/gendoc"
}
case "$part" in
run) timeout 150 python3 -m pytest -q -m cuda -p no:cacheprovider tests/test_gemm_probe.py \
       tests/test_host_issue.py tests/test_counting.py tests/test_generation_lean.py \
       tests/test_compile_child.py 2>&1 | grep -v USDT | tail -8
     echo "sched_autogroup_enabled $(cat /proc/sys/kernel/sched_autogroup_enabled 2>&1)"
     timeout 420 bash benchmarks/run_gpu.sh resnet ;;
opt60a) BUDGET=60 SIDES=gobrrr timeout 360 bash benchmarks/optimize_models.sh gpt2_1x1 \
          gpt2_8x512 resnet50_b1 bert_base_b32x128
        gendoc ;;
opt60b) BUDGET=60 SIDES=gobrrr bash benchmarks/optimize_models.sh resnet50_b256 \
          gpt2_train_8x256 vit_b16_b32 convnext_tiny_b64 mlp_16k ;;
after) BUDGET=60 SIDES=gobrrr bash benchmarks/optimize_models.sh resnet50_b256 \
         gpt2_train_8x256 vit_b16_b32 convnext_tiny_b64 mlp_16k resnet50_b1 gpt2_1x1 ;;
*) echo "unknown part $part"; exit 2 ;;
esac
# the per-row progress logs (the plan's decisions) in one file: a call brings back 8
if ls "$OUT"/models/*.log > /dev/null 2>&1; then
  tar czf "$OUT/models/logs.tgz" -C "$OUT/models" $(cd "$OUT/models" && ls *.log)
  rm -f "$OUT"/models/*.log
fi
