#!/usr/bin/env bash
# This session's last GPU call (~6 min of device time left): the fit's bisection, the
# generation report's size after the per-call compaction, optimize --generate.
set -uo pipefail
OUT=${OUT:-out}; mkdir -p "$OUT"
python3 -m pip install -q --no-deps --target /tmp/pylib .gpu_wheels/ijson-*.whl 2>&1 | tail -1
export PYTHONPATH="$PWD/src:/tmp/pylib${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
stamp() { echo "=== $1 ($(date -u +%FT%TZ))"; }
stamp "optimize hf:tinyllama-1.1b --generate 32 (fp32)"
timeout 150 python3 -m gobrrr optimize hf:tinyllama-1.1b --generate 32 --seq-len 128 \
  --budget-s 100 --json -q > "$OUT/optimize-generate-tinyllama.json" 2> "$OUT/opt.err" \
  || tail -3 "$OUT/opt.err"
python3 - "$OUT" <<'PY'
import json, sys
d = json.load(open(f"{sys.argv[1]}/optimize-generate-tinyllama.json"))
print("baseline", round(d["baseline_tokens_per_s"], 1), "winner", d["winner"], round(d["optimize_s"], 1))
for c in d["candidates"]:
    print(c["name"], c["tokens_per_s"] and round(c["tokens_per_s"], 1), c["speedup"] and round(c["speedup"], 2),
          c["prep_s"] and round(c["prep_s"], 1), c["top1_agreement"], c["rel_err"], c["passed"], c["error"])
PY
stamp "doctor hf:tinyllama-1.1b --generate 64 --dtype bf16 --no-experiments"
timeout 60 python3 -m gobrrr doctor hf:tinyllama-1.1b --generate 64 --seq-len 128 --dtype bf16 \
  --no-experiments --json -q > "$OUT/doctor-generate-tinyllama.json" 2> /dev/null || echo failed
python3 -c "import json,os,sys; p='$OUT/doctor-generate-tinyllama.json'; d=json.load(open(p)); print('bytes', os.path.getsize(p), 'diagnose_s', round(d['diagnose_s'],1), d['regime'])"
stamp "memory hf:gpt2 --train 8 x 512 --fit"
timeout 130 python3 -m gobrrr memory hf:gpt2 --train --batch-size 8 --seq-len 512 --device cuda \
  --fit --json -q > "$OUT/memory-fit-gpt2.json" 2>/dev/null || echo "failed: $?"
python3 -c "import json; f=json.load(open('$OUT/memory-fit-gpt2.json'))['fit']; print(f['predicted_max_batch'], json.dumps(f['checked']))" | cut -c1-600
stamp end
