#!/usr/bin/env bash
# Two (or more) GPUs of one host (the device tool's nvidia-h200-x2): gobrrr's communication
# ceilings from 1 KiB to 1 GiB under torchrun + NCCL, then the projection's 2-GPU check.
# Writes to $OUT: nvidia-smi-topo.txt, topology.json, comm_ceilings.{json,txt,svg},
# projection_check.{json,txt}, timings.txt. Aimed at under 3 minutes on 2 H200s.
# Usage: OUT=out bash benchmarks/dist_calibrate.sh
set -uo pipefail
export PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
OUT=${OUT:-out}; mkdir -p "$OUT"
# a fresh cache: every figure measured in this run (CAL_CACHE: one the caller keeps, for
# the doctor runs after this script; benchmarks/run4_x2.sh)
export XDG_CACHE_HOME="${CAL_CACHE:-$OUT/cache}"
N=${NPROC:-$(nvidia-smi -L | wc -l)}
python3 -c "import torch, sys; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'nccl', torch.cuda.nccl.version(), torch.cuda.device_count(), 'x', torch.cuda.get_device_name(0), 'python', sys.version.split()[0])" | tee "$OUT/timings.txt"
nvidia-smi topo -m > "$OUT/nvidia-smi-topo.txt" 2>&1
python3 -c "import json; from gobrrr.dist.topology import topology; print(json.dumps(topology(), indent=2))" > "$OUT/topology.json"
run() { timeout "$1" python3 -m torch.distributed.run --standalone --nproc-per-node "$N" "${@:2}"; }
t0=$(date +%s)
run 170 -m gobrrr calibrate --distributed --force --json > "$OUT/comm_ceilings.json" 2> "$OUT/comm_ceilings.stderr"
echo "calibrate --distributed (measured, 1 KiB..1 GiB, $N ranks): rc $? in $(( $(date +%s) - t0 )) s" | tee -a "$OUT/timings.txt"
t0=$(date +%s)
run 60 -m gobrrr calibrate --distributed > "$OUT/comm_ceilings.txt" 2>> "$OUT/comm_ceilings.stderr"
echo "calibrate --distributed (from the cache): rc $? in $(( $(date +%s) - t0 )) s" | tee -a "$OUT/timings.txt"
cat "$OUT/comm_ceilings.txt"
python3 -c "import json,sys; from gobrrr.show.dist_figures import comm_ceilings_svg; open(sys.argv[2],'w').write(comm_ceilings_svg(json.load(open(sys.argv[1]))))" "$OUT/comm_ceilings.json" "$OUT/comm_ceilings.svg"
t0=$(date +%s)
run 240 benchmarks/dist_projection_check.py "$OUT/projection_check.json" > "$OUT/projection_check.txt" 2>> "$OUT/projection_check.stderr"
echo "projection check: rc $? in $(( $(date +%s) - t0 )) s" | tee -a "$OUT/timings.txt"
cat "$OUT/projection_check.txt"
[ -z "${CAL_CACHE:-}" ] && rm -rf "$OUT/cache"
tail -5 "$OUT/comm_ceilings.stderr"
