#!/usr/bin/env bash
# Session v's GPU runs (issue 24: the training row's background compile), one part per
# device call (600 s at most; carry .gpu_wheels):
#   OUT=$OUT bash benchmarks/session_v_gpu.sh PART
# Every gobrrr process is stack-sampled (benchmarks/sampler/sitecustomize.py) into
# $OUT/samples-*/.
# 1. alone: the optimize search's background child for the GPT-2 training step with no
#    search beside it (child_alone.py), from a cold cache: as confined (12 cores, nice
#    10), then with every core; then the row itself (optimize_models.sh, gobrrr's side,
#    --budget-s 60) with its child sampled (ROW=0: not). REPEAT=n: each alone run n
#    times; ALONE_ARGS: child_alone.py's (--measure-s S: then verified and timed there);
#    NOSAMPLE=1: nothing sampled; TESTS_S=s: then every CUDA-marked test.
# 2. plain (issue 23, for the next session): the host-bound plain traces (the training
#    step, the compiled chain) recorded twice each, doctor three times after each with
#    the user's loop after every doctor (plain_traces_gpu.py --doctors=3): analyze
#    --step-ms against doctor's median run, beside how far doctor's runs lay apart.
# 3. train (issues 23 and 24): plain traces of the compiled training step (issue 23's set
#    lacks it) and of the optimize table's training row with the optimizer fused and
#    bf16 autocast, eager and compiled (default mode), doctor once after each
#    (TRAIN=names): where that compile's own gain comes from, read with analyze.
# 5. nodes (issue 24): the scheduled nodes that move the most bytes (fusion_bytes_check.py
#    --nodes) on the CUDA fusion misses, BERT-base 32x128 and ViT-B/16 b32 (NODES=names).
# 4. fusion (issue 24): gobrrr's fusion estimate against the bytes Triton's kernels move
#    by Inductor's count (fusion_bytes_check.py --device cuda) on the table's inference
#    shapes and the training row, and autocast_compile_bytes.py --device cuda (CPU
#    results: benchmarks/results/cpu/fusion_bytes/, .../autocast_compile_bytes/).
part=${1:?part}
. benchmarks/gpu_preamble.sh "${TAG:-session_v}" "$part"
cold() {  # a fresh Inductor and Triton cache for one process
  local d; d=$(mktemp -d)
  TORCHINDUCTOR_CACHE_DIR=$d/inductor TRITON_CACHE_DIR=$d/triton "$@"
}
sampled() {  # sampled NAME CMD...: the processes of CMD sampled into $OUT/samples-NAME
  local name=$1; shift
  if [[ ${NOSAMPLE:-0} == 1 ]]; then "$@"; return; fi
  GOBRRR_SAMPLE_DIR="$OUT/samples-$name" GOBRRR_SAMPLE_ARGV=child_alone.py \
    PYTHONPATH="$PWD/benchmarks/sampler:$PYTHONPATH" "$@"
}
nproc; uptime
if [[ $part == alone ]]; then
  timeout 60 python3 -m gobrrr calibrate --device cuda 2>&1 | grep -v USDT | tail -1
  for how in ${HOW:-confined all}; do
   for _ in $(seq "${REPEAT:-1}"); do
    flag=""; [[ $how == all ]] && flag=--all-cores
    # shellcheck disable=SC2086
    sampled "alone-$how" cold timeout 170 python3 benchmarks/child_alone.py $flag ${ALONE_ARGS:-} \
      2> >(grep -v -e USDT -e Warn | tail -3 >&2) | tee -a "$OUT/child_alone.jsonl"
   done
  done
  if [[ ${ROW:-1} == 1 ]]; then
    sampled row env BUDGET=60 SIDES=gobrrr timeout ${ROWS_S:-150} \
      bash benchmarks/optimize_models.sh ${ROW_CASES:-gpt2_train_8x256}
    if ls "$OUT"/models/*.log > /dev/null 2>&1; then
      tar czf "$OUT/models/logs.tgz" -C "$OUT/models" $(cd "$OUT/models" && ls *.log)
      rm -f "$OUT"/models/*.log
    fi
  fi
fi
if [[ $part == plain ]]; then
  timeout 500 python3 benchmarks/plain_traces_gpu.py "$OUT/plain" --doctors=3 \
    ${PLAIN:-gpt2_train_4x256 gpt2_train_4x256 pointwise@default pointwise@default} \
    2>&1 | grep -v -e USDT -e Warn | cut -c1-400
  tar czf "$OUT/plain.tgz" -C "$OUT" plain && rm -rf "$OUT/plain"
fi
if [[ $part == train ]]; then
  timeout 540 python3 benchmarks/plain_traces_gpu.py "$OUT/train" --doctors=1 \
    ${TRAIN:-gpt2_train_4x256@default gpt2_train_bf16_8x256 gpt2_train_bf16_8x256@default} \
    2>&1 | grep -v -e USDT -e Warn | cut -c1-400
  tar czf "$OUT/train.tgz" -C "$OUT" train && rm -rf "$OUT/train"
fi
if [[ $part == fusion ]]; then
  mkdir -p "$OUT/fusion"
  while read -r name args; do
    timeout 240 python3 benchmarks/fusion_bytes_check.py $args --device cuda \
      > "$OUT/fusion/$name.json" 2> >(grep -v -e "^I1" -e "^W1" -e USDT | tail -5 >&2)
    echo "$name rc $? $(cut -c1-300 "$OUT/fusion/$name.json")"
  done <<'CASES'
gpt2_8x512 hf:gpt2 --batch 8 --seq-len 512
bert_32x128 hf:bert-base-uncased --batch 32 --seq-len 128
vit_b32 torchvision:vit_b_16 --batch 32
resnet50_b256 torchvision:resnet50 --batch 256
convnext_b64 timm:convnext_tiny --batch 64
gpt2_train_8x256 hf:gpt2 --batch 8 --seq-len 256 --train
CASES
  timeout 240 python3 benchmarks/autocast_compile_bytes.py --device cuda --layers 12 \
    > "$OUT/fusion/autocast_gpt2_8x256.json" 2>/dev/null; echo "autocast rc $?"
fi
if [[ $part == nodes ]]; then  # the scheduled nodes behind a CUDA fusion miss (NODES=cases)
  mkdir -p "$OUT/nodes"
  while read -r name args; do
    [[ " ${NODES:-bert_32x128 vit_b32} " == *" $name "* ]] || continue
    timeout 150 python3 benchmarks/fusion_bytes_check.py $args --device cuda --nodes 80 \
      > "$OUT/nodes/$name.json" 2>/dev/null
    echo "$name rc $? $(cut -c1-200 "$OUT/nodes/$name.json")"
  done <<'CASES'
bert_32x128 hf:bert-base-uncased --batch 32 --seq-len 128
vit_b32 torchvision:vit_b_16 --batch 32
CASES
fi
if [[ ${TESTS_S:-0} != 0 ]]; then
  timeout "$TESTS_S" python3 -m pytest -q -p no:cacheprovider -m cuda tests 2>&1 \
    | grep -v USDT | grep -e "^E " -e "^FAILED" -e passed -e failed -e error | tail -30
fi
tar czf "$OUT/samples.tgz" -C "$OUT" $(cd "$OUT" && ls -d samples-* 2>/dev/null) && rm -rf "$OUT"/samples-*
