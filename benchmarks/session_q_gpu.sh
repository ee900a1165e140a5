#!/usr/bin/env bash
# Session q's GPU runs, one part per device call (600 s at most; carry .gpu_wheels):
#   OUT=$OUT bash benchmarks/session_q_gpu.sh all   # the three below, in one call
#   OUT=$OUT bash benchmarks/session_q_gpu.sh smoke # issue 27: train_ddp.py --model resnet50
#        (its dataset a pool drawn once) under `torchrun -m gobrrr run`, one process (NCCL)
#   OUT=$OUT bash benchmarks/session_q_gpu.sh pred  # issue 24 item 4: optimize of ResNet-50
#        b1 at --budget-s 60, twice (cold Inductor caches each), with the report's "how far
#        the predictions have been off" (the second run reads the first in this machine's
#        record)
#   OUT=$OUT bash benchmarks/session_q_gpu.sh cudatests  # every CUDA-marked test
#   OUT=$OUT bash benchmarks/session_q_gpu.sh contention # issue 24: do the background
#        compile child's cores slow the host-bound candidates timed beside it?
#        (background_contention.py, GPT-2 8x512 fp32 against bf16)
#   ROWS="case ..." OUT=$OUT bash benchmarks/session_q_gpu.sh rows  # issue 24: optimize
#        at --budget-s 60 on the table's rows (optimize_models.sh, gobrrr's side, cold
#        caches) with the background child stopped while candidates are timed
#   OUT=$OUT bash benchmarks/session_q_gpu.sh alone  # issue 24: GPT-2 8x512's bf16 cast
#        in an optimize of its own (--only bf16_cast), with and without the diagnosis: is
#        the search's low figure for it the search's other candidates, or the process?
#   OUT=$OUT bash benchmarks/session_q_gpu.sh insearch  # for the next session: why a
#        host-bound candidate measures low in the full search (insearch_host_bound.py,
#        four variants, each its own process from cold caches; ~4 minutes)
part=${1:?all, smoke, pred, cudatests, contention, rows, alone, alone2 or insearch}
if [ "$part" = all ]; then
  for p in smoke pred cudatests; do OUT=$OUT/$p bash "$0" "$p"; done
  exit 0
fi
. benchmarks/gpu_preamble.sh session_q "$part"
cold() {  # a fresh Inductor and Triton cache for one process
  local d; d=$(mktemp -d)
  TORCHINDUCTOR_CACHE_DIR=$d/inductor TRITON_CACHE_DIR=$d/triton "$@"
}
case "$part" in
smoke)
  timeout 200 python3 -m torch.distributed.run --standalone --nproc-per-node 1 -m gobrrr run \
    --json "$OUT/run_resnet50_ddp_w1.json" benchmarks/run_scripts/train_ddp.py \
    --model resnet50 --steps 30 2>&1 | grep -v USDT | tail -25 ;;
pred)
  timeout 120 python3 -m gobrrr calibrate --device cuda 2>&1 | grep -v USDT | tail -2
  cold timeout 150 python3 -m gobrrr optimize torchvision:resnet50 --batch-size 1 \
    --budget-s 60 --json --html "$OUT/optimize-resnet50-b1.html" \
    > "$OUT/optimize-resnet50-b1.json" 2> >(grep -v -e USDT -e Warn | tail -30 >&2)
  python3 -c "import json,sys; d=json.load(open(sys.argv[1])); [print(k) for k in d['prediction_record']]" \
    "$OUT/optimize-resnet50-b1.json"
  cold timeout 150 python3 -m gobrrr optimize torchvision:resnet50 --batch-size 1 \
    --budget-s 60 2>&1 | grep -v -e USDT -e Warn | tee "$OUT/optimize-resnet50-b1-again.txt" \
    | tail -40 ;;
cudatests)
  timeout ${TESTS_S:-300} python3 -m pytest -q -p no:cacheprovider -m cuda tests 2>&1 \
    | grep -v USDT | grep -e "^E " -e "^FAILED" -e passed -e failed -e error | tail -30 ;;
contention)
  cold timeout 300 python3 benchmarks/background_contention.py --out "$OUT/contention.json" \
    ${CONTENTION_ARGS:-} \
    2>&1 | grep -v -e USDT -e Warn | tail -40 ;;
alone)
  for extra in "" "--no-diagnose"; do
    echo "== optimize --only bf16_cast $extra"
    cold timeout 150 python3 -m gobrrr optimize hf:gpt2 --batch-size 8 --seq-len 512 \
      --only bf16_cast --budget-s 60 $extra 2>&1 | grep -v -e USDT -e Warn \
      | grep -e "bf16_cast" -e "Best" -e "budget-s" | tail -8
  done ;;
alone2)  # the full search without a background child (3 cores: none started), and the
  # eager candidates without any compile candidate (no child at all)
  echo "== taskset -c 0-2, the full search"
  cold timeout 150 taskset -c 0-2 python3 -m gobrrr optimize hf:gpt2 --batch-size 8 \
    --seq-len 512 --budget-s 60 2>&1 | grep -v -e USDT -e Warn \
    | grep -e "^│bf16_cast " -e "^│tf32 " -e "Best" -e "s of --budget-s" -e "^note" \
    | grep -v -e "too little" -e "needs ~" | tail -12
  [ -n "${ONLY_TASKSET:-}" ] && exit 0
  echo "== --only bf16_cast,bf16_autocast,tf32,cuda_graphs,inference_mode"
  cold timeout 150 python3 -m gobrrr optimize hf:gpt2 --batch-size 8 --seq-len 512 \
    --only bf16_cast,bf16_autocast,tf32,cuda_graphs,inference_mode --budget-s 60 2>&1 \
    | grep -v -e USDT -e Warn | grep -e "^│bf16_cast " -e "^│tf32 " -e "Best" \
    -e "s of --budget-s" | tail -8 ;;
insearch)
  timeout 60 python3 -m gobrrr calibrate --device cuda 2>&1 | grep -v USDT | tail -1
  for v in ${VARIANTS:-only sleeper full no-child}; do
    cold timeout 150 python3 benchmarks/insearch_host_bound.py "$v" 2> "$OUT/insearch-$v.err" \
      | tee -a "$OUT/insearch.jsonl"
  done ;;
rows)
  timeout 60 python3 -m gobrrr calibrate --device cuda 2>&1 | grep -v USDT | tail -1
  BUDGET=60 SIDES=gobrrr timeout 560 bash benchmarks/optimize_models.sh ${ROWS:?cases} ;;
*) echo "unknown part $part"; exit 2 ;;
esac
if ls "$OUT"/models/*.log > /dev/null 2>&1; then
  tar czf "$OUT/models/logs.tgz" -C "$OUT/models" $(cd "$OUT/models" && ls *.log)
  rm -f "$OUT"/models/*.log
fi
