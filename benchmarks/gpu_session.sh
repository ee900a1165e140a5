#!/usr/bin/env bash
# One device-machine session (device tool): the layout and trust issues' CUDA checks.
# Everything lands in $OUT/run.log and $OUT/results.tgz (the device returns few files).
set -uo pipefail
export PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
OUT=${OUT:-out}; R=/tmp/results; mkdir -p "$OUT" $R/doctor
exec > >(tee "$OUT/run.log") 2>&1
python3 -c "import torch, sys; print('torch', torch.__version__, 'cuda', torch.version.cuda, torch.cuda.get_device_name(0), 'python', sys.version.split()[0])"
echo "=== cuda tests"; timeout 300 python3 -m pytest -q -p no:cacheprovider -m cuda tests 2>&1 | tee $R/pytest-cuda.txt | tail -4
echo "=== state tests (CPU models, on this host)"; timeout 200 python3 -m pytest -q -p no:cacheprovider tests/test_state.py tests/test_settings.py 2>&1 | tail -3
echo "=== doctor + trace"
for e in mlp transformer mlp_train; do
  timeout 120 python3 -m gobrrr doctor examples:$e --device cuda --json -q --trace $R/doctor/$e.trace.json > $R/doctor/$e.json || echo "doctor $e FAILED"
  python3 -c "import json; t=json.load(open('$R/doctor/$e.trace.json')); d=json.load(open('$R/doctor/$e.json')); o=t['otherData']; s=d['state']; print('$e', d['regime'], {k: round(v,3) for k,v in d['fractions'].items()}, 'kernels', o['gobrrr.kernels'], 'without start', o['gobrrr.kernels_without_start_time'], 'idle us', o['gobrrr.idle_between_kernels_us'], '| state', s['storages'], 'storages', s['snapshot_bytes'], 'B', round(s['snapshot_s'],4), 's', round(s['restore_s'],4), 's', s['snapshot_on'], s['warnings'])"
done
echo "=== reports (GPT-2, ResNet-50)"; OUT=$R timeout 300 bash benchmarks/report_gpu.sh 2>&1 | tail -12
python3 -c "import json; t=json.load(open('$R/rep/gpt2.trace.json')); o=t['otherData']; print('gpt2 trace kernels', o['gobrrr.kernels'], 'without start', o['gobrrr.kernels_without_start_time']); d=json.load(open('$R/rep/gpt2.json')); s=d['state']; print('gpt2 state', s['storages'], 'storages', round(s['snapshot_bytes']/2**20), 'MiB', round(s['snapshot_s'],3), 's', round(s['restore_s'],3), 's', s['warnings'])"
tar czf "$OUT/results.tgz" -C $R .
ls -la "$OUT"
