#!/usr/bin/env bash
# The closing device-machine check of a session: every CUDA test, and the model-name
# targets the model-names issue asks to work on the GPU. Results in $OUT/final.log.
set -uo pipefail
export PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
OUT=${OUT:-out}; mkdir -p "$OUT"
exec > >(tee "$OUT/final.log") 2>&1
python3 -c "import torch, transformers, sys; print('torch', torch.__version__, torch.cuda.get_device_name(0), 'transformers', transformers.__version__, 'python', sys.version.split()[0])"
echo "=== cuda + vision tests"
timeout 240 python3 -m pytest -q -p no:cacheprovider -m "cuda or vision" tests 2>&1 | tail -4
summ() { python3 -c "import json,sys; d=json.load(open(sys.argv[1])); m=d['workload'].get('model',{}); print(sys.argv[2], d['regime'], {k: round(v,3) for k,v in d['fractions'].items()}, 'T_wall %.3g ms' % (d['timing']['median_s']*1e3), 'batch', [p['batch_size'] for p in (d['experiments']['batch_scaling'] or {}).get('points', [])], 'attn', m.get('attn_implementation'), 'uncounted', d['counts']['uncounted_ops'][:4], 'warnings', [n for n in d['notes'] if n.startswith('warning')])" "$@"; }
for t in "hf:gpt2 --batch-size 8 --seq-len 512" "torchvision:resnet50 --batch-size 64" "hf:tinyllama-1.1b --batch-size 1 --seq-len 512 --dtype bf16"; do
  /usr/bin/time -f "  wall %e s" timeout 150 python3 -m gobrrr doctor $t --device cuda --json -q > /tmp/r.json || echo "FAILED: $t"
  summ /tmp/r.json "$t"
done
