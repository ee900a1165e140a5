#!/usr/bin/env bash
# One device-machine session (device tool): the layout issue's CUDA checks.
# Everything lands in $OUT/run.log and $OUT/results.tgz (the device returns few files).
set -uo pipefail
export PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
OUT=${OUT:-out}; R=/tmp/results; mkdir -p "$OUT" $R/traces $R/lab $R/doctor
exec > >(tee "$OUT/run.log") 2>&1
python3 -c "import torch, sys; print('torch', torch.__version__, 'cuda', torch.version.cuda, torch.cuda.get_device_name(0), 'python', sys.version.split()[0])"
echo "=== cuda tests"; timeout 400 python3 -m pytest -q -p no:cacheprovider -m cuda tests 2>&1 | tee $R/pytest-cuda.txt | tail -15
echo "=== traces"; timeout 120 python3 benchmarks/record_traces.py $R/traces
echo "=== l2 flush"; timeout 120 python3 benchmarks/l2_flush.py | tee $R/l2_flush.txt
echo "=== doctor + trace"
for e in mlp transformer; do
  timeout 120 python3 -m gobrrr doctor examples:$e --device cuda --json -q --trace $R/doctor/$e.trace.json > $R/doctor/$e.json || echo "doctor $e FAILED"
  python3 -c "import json; t=json.load(open('$R/doctor/$e.trace.json')); d=json.load(open('$R/doctor/$e.json')); o=t['otherData']; print('$e', d['regime'], {k: round(v,3) for k,v in d['fractions'].items()}, 'kernels', o['gobrrr.kernels'], 'without start', o['gobrrr.kernels_without_start_time'], 'idle us', o['gobrrr.idle_between_kernels_us'])"
done
echo "=== lab"; OUT=$R/lab timeout 200 bash benchmarks/lab_gpu.sh > $R/lab/lab_gpu.log 2>&1; tail -5 $R/lab/lab_gpu.log
tar czf "$OUT/results.tgz" -C $R .
ls -la "$OUT"
