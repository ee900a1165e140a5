#!/usr/bin/env bash
# Issue 20 (the one-pipeline redesign) on the GPU machine: the same figures before and
# after the move. Run once on the old tree and once on the new; results under $OUT.
#   OUT=/some/dir bash benchmarks/redesign_gpu.sh
# Stages: the CUDA and vision tests; calibrate; doctor hf:gpt2 (8 x 512, fp32); doctor of a
# torch.compile'd GPT-2 (benchmarks/redesign_targets.py); doctor of the MLP training step;
# with OPTIMIZE=1 (the default; the "before" run had none) optimize of examples:mlp and
# gobrrr show of the GPT-2 report.
set -uo pipefail
export PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
OUT=${OUT:-out}; mkdir -p "$OUT"
log="$OUT/redesign_gpu.log"
exec > >(tee "$log") 2>&1
python3 -c "import torch, sys; print('torch', torch.__version__, 'cuda', torch.version.cuda, torch.cuda.get_device_name(0), 'python', sys.version.split()[0])"
# (the device copy carries no current git metadata: the log names the commit by hand)
echo "=== tests ($(date -u +%FT%TZ))"
timeout 240 python3 -m pytest -q -p no:cacheprovider -m "cuda or vision" tests 2>&1 | grep -v USDT | tail -8
echo "=== calibrate ($(date -u +%FT%TZ))"
/usr/bin/time -f "calibrate wall %e s" python3 -m gobrrr calibrate --device cuda --json > "$OUT/calibrate.json"
run() {  # name, then doctor's arguments
  local name=$1; shift
  /usr/bin/time -f "doctor $name wall %e s" timeout 150 python3 -m gobrrr doctor "$@" --device cuda --json -q \
    > "$OUT/doctor-$name.json" 2> "/tmp/$name.err" || { echo "doctor $name FAILED"; tail -15 "/tmp/$name.err"; }
  grep -v USDT "/tmp/$name.err" | tail -2
  python3 benchmarks/summarize_report.py "$name" "$OUT/doctor-$name.json"
}
echo "=== doctor ($(date -u +%FT%TZ))"
run gpt2 hf:gpt2 --batch-size 8 --seq-len 512
run gpt2_compiled benchmarks/redesign_targets.py:gpt2_compiled
run mlp_train examples:mlp_train
if [ "${OPTIMIZE:-1}" = 1 ]; then  # the search loop and the A/B harness on CUDA
  echo "=== optimize ($(date -u +%FT%TZ))"
  /usr/bin/time -f "optimize mlp wall %e s" timeout 120 python3 -m gobrrr optimize examples:mlp \
    --device cuda --budget-s 45 --json -q > "$OUT/optimize-mlp.json" 2> /tmp/opt.err \
    || { echo "optimize mlp FAILED"; tail -15 /tmp/opt.err; }
  python3 - "$OUT/optimize-mlp.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
print("best", d["best"]["name"], d["best"].get("measured_speedup"))
for r in d["remedies"]:
    print(f"  {r['name']}: {r['status']} predicted {r['predicted_speedup']} measured {r['measured_speedup']}")
PY
  python3 -m gobrrr show "$OUT/doctor-gpt2.json" --html /tmp/gpt2.html -q | head -3
fi
echo "=== done ($(date -u +%FT%TZ))"
