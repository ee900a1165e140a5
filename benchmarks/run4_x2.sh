#!/usr/bin/env bash
# Issue 27's run 4 on nvidia-h200-x2 (two H200s of one host), on the code after the
# one-pipeline redesign, in three device calls of under 10 minutes each (carry
# .gpu_wheels); everything under $OUT, to be committed as benchmarks/results/h200x2/run4/:
#   OUT=$OUT bash benchmarks/run4_x2.sh dist     # communication ceilings, the projection
#        check (DDP pair, FSDP2 pair: dist_projection_check.py), the DDP doctor cases
#        with rank traces (ddp_comm, ddp_compute, ddp_straggler: dist_gpu.sh)
#   OUT=$OUT bash benchmarks/run4_x2.sh fsdp     # the FSDP2 doctor and optimize cases
#        with rank traces (dist_fsdp_gpu.sh), the real programs under DDP (GPT-2,
#        ResNet-50: dist_models_gpu.sh, traces kept)
#   OUT=$OUT bash benchmarks/run4_x2.sh run      # a user's DDP training scripts (GPT-2,
#        ResNet-50: run_scripts/train_ddp.py) under `torchrun -m gobrrr run`
#   OUT=$OUT bash benchmarks/run4_x2.sh contention   # resnet50_ddp's and gpt2_ddp's
#        compute kernels with and without DDP's all-reduce beside them
#        (nccl_contention_x2.py: the 13-15 points of resnet50_ddp's bound unexplained);
#        then ddp_comm's and ddp_compute's ranks traced the plain way against their
#        no_sync bound (plain_ranks.py, issue 23)
# Each part then reads its kept rank traces with `gobrrr analyze` on the same machine
# (dist_analyze_check.py: analyze's split against the doctor's of the same run); the
# comparison stays in analyze_check.json. At most 8 files come back from $OUT: each
# part ends by packing its files into run4-PART.tgz and its rank traces into
# run4-PART-traces.tgz (to read here, not to commit), the log left beside them.
part=${1:?dist, fsdp, run or contention}
. benchmarks/gpu_preamble.sh run4 "$part"
CACHE=${CACHE:-/tmp/run4-cache}; mkdir -p "$CACHE"
export XDG_CACHE_HOME=$CACHE  # the calibrations of the dist part serve the later parts
PY=python3
timeout 90 $PY -m gobrrr calibrate --device cuda -q 2>&1 | tail -2
check() {  # OUT.json DOCTOR.json:TRACES ...: analyze against doctor, then the traces go
  timeout 240 $PY benchmarks/dist_analyze_check.py "$@" 2>&1 | grep -v USDT | tail -12
}
case "$part" in
dist)
  CAL_CACHE=$CACHE OUT=$OUT/cal timeout 420 bash benchmarks/dist_calibrate.sh 2>&1 | tail -30
  OUT=$OUT/ddp PY=$PY timeout 450 bash benchmarks/dist_gpu.sh 2>&1 | tail -20
  check "$OUT/ddp/analyze_check.json" \
    "$OUT/ddp/ddp_comm.json:$OUT/ddp/traces_ddp_comm" \
    "$OUT/ddp/ddp_compute.json:$OUT/ddp/traces_ddp_compute" \
    "$OUT/ddp/ddp_straggler.json:$OUT/ddp/traces_ddp_straggler" ;;
fsdp)
  OUT=$OUT/fsdp PY=$PY timeout 260 bash benchmarks/dist_fsdp_gpu.sh 2>&1 | tail -20
  check "$OUT/fsdp/analyze_check.json" \
    "$OUT/fsdp/fsdp_comm.json:$OUT/fsdp/traces_fsdp_comm" \
    "$OUT/fsdp/fsdp_compute.json:$OUT/fsdp/traces_fsdp_compute"
  OUT=$OUT/models PY=$PY TRACES=1 timeout 300 bash benchmarks/dist_models_gpu.sh 2>&1 | tail -30
  check "$OUT/models/analyze_check.json" \
    "$OUT/models/doctor_gpt2_ddp.json:$OUT/models/traces_gpt2_ddp" \
    "$OUT/models/doctor_resnet50_ddp.json:$OUT/models/traces_resnet50_ddp" ;;
run)
  for model in gpt2 resnet50; do
    timeout 240 $PY -m torch.distributed.run --standalone --nproc-per-node 2 -m gobrrr run \
      --json "$OUT/run_${model}_ddp.json" --html "$OUT/run_${model}_ddp.html" \
      benchmarks/run_scripts/train_ddp.py --model $model --steps 60 2>&1 \
      | grep -v USDT | tail -30
  done ;;
contention)
  for spec in resnet50_ddp:64 gpt2_ddp:8; do
    timeout 240 $PY -m torch.distributed.run --standalone --nproc-per-node 2 \
      benchmarks/nccl_contention_x2.py "$OUT/contention_${spec%%:*}" --target "${spec%%:*}" \
      --batch "${spec##*:}" 2>&1 | grep -v -e USDT -e Warn | tail -4
  done
  # issue 23: the same job's ranks traced the plain way, against their no_sync bound
  for ex in ddp_comm ddp_compute; do
    timeout 150 $PY -m torch.distributed.run --standalone --nproc-per-node 2 \
      benchmarks/plain_ranks.py "$OUT/plain_$ex" --example $ex --device cuda 2>&1 \
      | grep -v -e USDT -e Warn | tail -3
    timeout 120 $PY benchmarks/plain_ranks.py --analyze "$OUT/plain_$ex"
    mkdir -p "$OUT/traces_plain_$ex" && mv "$OUT/plain_$ex"/rank*.json "$OUT/traces_plain_$ex/"
  done ;;
*) echo "unknown part $part"; exit 2 ;;
esac
du -sh "$OUT"/* 2>/dev/null
cd "$OUT" || exit 1
traces=$(find . -mindepth 1 -maxdepth 3 -type d -name 'traces_*')
# shellcheck disable=SC2086
[ -n "$traces" ] && tar czf "run4-$part-traces.tgz" $traces && rm -rf $traces
find . -mindepth 1 -maxdepth 1 ! -name "run4-$part*" -print0 \
  | tar czf "run4-$part.tgz" --null -T - \
  && find . -mindepth 1 -maxdepth 1 ! -name "run4-$part*" -exec rm -rf {} +
ls -la
