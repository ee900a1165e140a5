#!/usr/bin/env bash
# The next GPU session's runs after session g, one part per device call (600 s at most;
# carry .gpu_wheels), in priority order:
#   OUT=$OUT bash benchmarks/session_h_gpu.sh pred     # issue 24: CUDA tests of the host
#        issue time and the GEMM shape probe, then benchmarks/prediction_data_gpu.py
#        (issue time and doctor report per budget-60 workload: $OUT/pred/host_issue.json,
#        reports.tar.gz; read with benchmarks/prediction_check.py)
#   OUT=$OUT bash benchmarks/session_h_gpu.sh opt60a   # issue 24: gobrrr at --budget-s 60, 4 rows
#   OUT=$OUT bash benchmarks/session_h_gpu.sh opt60b   #           the other 5 rows
#   OUT=$OUT bash benchmarks/session_h_gpu.sh mem CASE # issue 26: memory_table.py case(s)
#   OUT=$OUT bash benchmarks/session_h_gpu.sh mem-throughput [CASES] # issue 26 item 3:
#        memory --fit --throughput at the case's first batch (GPT-2 small training 4 x 512,
#        ResNet-50 training 32; default both, 280 s each): samples/s at doubling batches
#        up to the batch that fits, the knee, the gain ($OUT/memory/throughput.json,
#        CASE_throughput.json; each rung's time in the log as it is measured)
#   OUT=$OUT bash benchmarks/session_h_gpu.sh run      # issue 22: benchmarks/run_gpu.sh again
#        after the report moved to a child process (the CUDA test, GPT-2 and ResNet-50
#        scripts, the overhead after the window)
# opt60a/b re-run gobrrr's side after session g's changes (CUDA graphs from the measured
# replay, the host's issue time as a floor, the GEMM shapes' own precision ratios, the
# compile probe in a child process, the stack's tie rule); mem re-runs the table after the
# snapshot moved to the host and the fit counts the largest tensor twice. hand: the
# fixed hand search (all nine hand sides exist: only to re-measure).
set -uo pipefail
OUT=${OUT:-out}; mkdir -p "$OUT"
part=${1:?pred, opt60a, opt60b, hand, mem, mem-throughput or run}
exec > >(tee "$OUT/session_h-$part.log") 2>&1
python3 -m pip install -q --no-deps --target /tmp/pylib .gpu_wheels/*.whl 2>&1 | tail -1
export PYTHONPATH="$PWD/src:/tmp/pylib${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
case "$part" in
pred) timeout 100 python3 -m pytest -q -m cuda tests/test_host_issue.py tests/test_gemm_probe.py \
        -p no:cacheprovider
      timeout 480 python3 benchmarks/prediction_data_gpu.py --out "$OUT/pred" ;;
opt60a) BUDGET=60 SIDES=gobrrr bash benchmarks/optimize_models.sh gpt2_1x1 gpt2_8x512 \
          resnet50_b1 bert_base_b32x128 ;;
opt60b) BUDGET=60 SIDES=gobrrr bash benchmarks/optimize_models.sh resnet50_b256 \
          gpt2_train_8x256 vit_b16_b32 convnext_tiny_b64 mlp_16k ;;
hand) SIDES=hand timeout 580 bash benchmarks/optimize_models.sh vit_b16_b32 resnet50_b256 \
        gpt2_train_8x256 ;;
mem) timeout 580 python3 benchmarks/memory_table.py --out "$OUT/memory" --cases "${2:?case}" \
       --timeout-s 560 ;;
mem-throughput) cases=${2:-gpt2_train_512,resnet50_train}
    [[ $cases == *,* ]] && per=280 || per=560
    timeout 580 python3 benchmarks/memory_table.py --out "$OUT/memory" --throughput \
      --cases "$cases" --timeout-s "$per" ;;
run) timeout 580 bash benchmarks/run_gpu.sh ;;
*) echo "unknown part $part"; exit 2 ;;
esac
rm -f "$OUT"/models/*.log
