#!/usr/bin/env bash
# Session p's GPU runs, one part per device call (600 s at most; carry .gpu_wheels):
#   OUT=$OUT bash benchmarks/session_p_gpu.sh train   # issue 24: the GPT-2 8x256 training
#        step compiled region by region and captured whole in one CUDA graph, beside the
#        whole-step compile and eager (train_compile_cost.py, each variant one process
#        from cold Inductor and Triton caches)
#   OUT=$OUT bash benchmarks/session_p_gpu.sh gen     # issue 21 follow-up: optimize
#        --generate with a cached calibration (the winner against the bandwidth bound,
#        90bb927) and its page; first the whole-step compile's phases (compile_times)
#   OUT=$OUT bash benchmarks/session_p_gpu.sh fsdp1   # issue 27, item 2: FSDP2's host work
#        at world size 1 (fsdp_host_work.py under torchrun, one process)
#   OUT=$OUT bash benchmarks/session_p_gpu.sh smoke   # issue 27: run4_x2.sh's DDP training
#        script on CUDA under `torchrun -m gobrrr run` with one process (NCCL, world 1)
#   OUT=$OUT bash benchmarks/session_p_gpu.sh qwen    # issue 21 follow-up: the Qwen2.5-0.5B
#        b1 row of generate_table.py again, after session o's realized GEMV inputs
#   OUT=$OUT bash benchmarks/session_p_gpu.sh cudatests  # every CUDA-marked test
part=${1:?train, gen, fsdp1, smoke, qwen or cudatests}
. benchmarks/gpu_preamble.sh session_p "$part"
cold() {  # a fresh Inductor and Triton cache for one process
  local d; d=$(mktemp -d)
  TORCHINDUCTOR_CACHE_DIR=$d/inductor TRITON_CACHE_DIR=$d/triton "$@"
}
case "$part" in
train)
  # VARIANTS: comma-separated, each train_compile_cost.py's arguments
  IFS=, read -ra vs <<< "${VARIANTS:-eager --plain,eager,eager --graph,regional --mode default --graph,regional --mode default,step --mode reduce-overhead}"
  for v in "${vs[@]}"; do
    echo "== $v"
    cold timeout 200 python3 benchmarks/train_compile_cost.py $v 2>&1 | grep -v USDT | tail -${TAIL:-3} \
      | tee -a "$OUT/train_variants.jsonl.log"
  done
  grep '^{' "$OUT/train_variants.jsonl.log" > "$OUT/train_variants.jsonl" ;;
gen)
  TAIL=60 VARIANTS="step --mode reduce-overhead --times" OUT=$OUT/times bash "$0" train | tail -62
  timeout 120 python3 -m gobrrr calibrate --device cuda 2>&1 | grep -v USDT | tail -2
  cold timeout 200 python3 -m gobrrr optimize hf:gpt2 --generate 32 --budget-s 60 --json \
    --html "$OUT/optimize-generate-gpt2.html" > "$OUT/optimize-generate-gpt2.json" \
    2> >(grep -v -e USDT -e Warn | tail -40 >&2)
  python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print({k: d.get(k) for k in ('bound_tokens_per_s',)}); print(*d.get('notes', [])[-4:], sep='\n')" "$OUT/optimize-generate-gpt2.json" ;;
fsdp1)
  timeout 200 python3 -m torch.distributed.run --standalone --nproc-per-node 1 \
    benchmarks/fsdp_host_work.py "$OUT/fsdp_host_work_w1.json" 2>&1 | grep -v USDT | tail -8 ;;
smoke)
  timeout 300 python3 -m torch.distributed.run --standalone --nproc-per-node 1 -m gobrrr run \
    --json "$OUT/run_${MODEL:-gpt2}_ddp_w1.json" benchmarks/run_scripts/train_ddp.py \
    --model ${MODEL:-gpt2} --steps 30 \
    2>&1 | grep -v USDT | tail -25 ;;
qwen)
  timeout ${TABLE_S:-540} python3 benchmarks/generate_table.py --out "$OUT/generate.json" \
    --md "$OUT/generate.md" --models ${MODELS:-qwen2.5-0.5b} --batches 1 \
    --optimize-budget-s ${OPT_BUDGET:-200} 2>&1 \
    | grep -v -e USDT -e Warn -e "Model config" -e "Failed to load" | tail -30
  cat "$OUT/generate.md" ;;
cudatests)
  timeout ${TESTS_S:-470} python3 -m pytest -q -p no:cacheprovider -m cuda tests 2>&1 \
    | grep -v USDT | grep -e "^E " -e "^FAILED" -e passed -e failed -e error | tail -30 ;;
*) echo "unknown part $part"; exit 2 ;;
esac
