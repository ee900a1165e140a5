#!/usr/bin/env bash
# Run on the GPU machine (device tool): CUDA tests and measurements, results under $OUT.
# Usage: bash benchmarks/gpu_check.sh [STAGE...]   stages: tests calibrate (default: all)
set -uo pipefail
export PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
OUT=${OUT:-out}; mkdir -p "$OUT"
stages=${*:-tests calibrate doctor}
python3 -c "import torch, sys; print('torch', torch.__version__, 'cuda', torch.version.cuda, torch.cuda.get_device_name(0), 'python', sys.version.split()[0])"
for s in $stages; do
  echo "=== stage $s ($(date -u +%FT%TZ))"
  case $s in
    tests) python3 -m pytest -q -p no:cacheprovider tests 2>&1 | tee "$OUT/pytest.txt" | tail -25 ;;
    calibrate) /usr/bin/time -f "calibrate wall %e s" python3 -m gobrrr calibrate --device cuda --force --json > "$OUT/h200-calibrate.json"; python3 -m gobrrr calibrate --device cuda ;;
    doctor)
      for e in mlp matmul pointwise transformer mlp_train; do
        /usr/bin/time -f "doctor $e wall %e s" python3 -m gobrrr doctor examples:$e --device cuda --json -q > "/tmp/doctor-$e.json" || echo "doctor $e FAILED"
        python3 -c "import json,sys; d=json.load(open('/tmp/doctor-$e.json')); print('$e', d['regime'], {k: round(v,3) for k,v in d['fractions'].items()}); [print('   ', x) for x in d['verdict']['evidence']]; print('   ', d['verdict']['agreement']); print('    notes', d['notes'])" 2>&1 | grep -v USDT
      done ;;
    validate-run)
      mkdir -p "$OUT/val"
      timeout 300 python3 benchmarks/validate.py run "$OUT/val" 2>&1 | grep -v USDT ;;
    lab)
      OUT=$OUT bash benchmarks/lab_gpu.sh ;;
    validate)
      mkdir -p "$OUT/val"
      timeout 300 python3 benchmarks/validate.py run "$OUT/val" 2>&1 | grep -v USDT
      timeout 240 ncu --clock-control none --profile-from-start off --csv --metrics \
        dram__throughput.avg.pct_of_peak_sustained_elapsed,sm__throughput.avg.pct_of_peak_sustained_elapsed,sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active,gpu__time_duration.sum \
        --log-file "$OUT/val/ncu.csv" python3 benchmarks/validate.py ncu-target 2>&1 | grep -v "^==PROF==" | tail -5
      python3 benchmarks/validate.py compare "$OUT/val" ;;
    gpt2)
      /usr/bin/time -f "doctor gpt2 8x512 wall %e s" python3 -m gobrrr doctor benchmarks/validate.py:gpt2_large --device cuda 2>&1 | grep -v USDT ;;
    *) echo "unknown stage $s" ;;
  esac
done
