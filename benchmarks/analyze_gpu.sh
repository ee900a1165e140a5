#!/usr/bin/env bash
# Issue 13 on the device machine: record the attention and GPT-2 training-step traces with
# plain torch.profiler, analyze them (and the committed H200 traces) with this GPU's
# calibration, and doctor the same workloads, so the two can be compared line by line;
# then the attention benchmark and every CUDA test. About 6 minutes on an H200.
# Back in $OUT: analyze_gpu.log, traces/*.json.gz, reports.tgz (every JSON report),
# attention_softmax.{txt,json}.
set -uo pipefail
export PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
OUT=${OUT:-out}; R=/tmp/reports; mkdir -p "$OUT/traces" $R
exec > >(tee "$OUT/analyze_gpu.log") 2>&1
python3 -c "import torch, transformers, sys; print('torch', torch.__version__, torch.cuda.get_device_name(0), 'transformers', transformers.__version__, 'python', sys.version.split()[0])"
python3 -c "import ijson; print('ijson backend', ijson.backend)" 2>/dev/null || echo "ijson: not installed (analyze uses its pure-Python reader)"
g() { python3 -m gobrrr "$@"; }
s() { python3 benchmarks/summarize_report.py "$@"; }

echo "=== record (plain torch.profiler)"
timeout 180 python3 benchmarks/record_traces.py "$OUT/traces" attention gpt2_train_step

echo "=== calibrate (this GPU, forced)"
timeout 120 python3 -m gobrrr calibrate --device cuda --force --json > $R/calibrate.json || echo "calibrate FAILED"

echo "=== analyze (this GPU's calibration) vs doctor"
for t in attention gpt2_train_step; do
  /usr/bin/time -f "  analyze $t: wall %e s, peak RSS %M KB" timeout 120 python3 -m gobrrr analyze "$OUT/traces/$t.json.gz" --json > $R/analyze-$t.json || echo "analyze $t FAILED"
done
for t in gpt2_forward mlp_b1_forward mlp_train_step pointwise_chain; do
  timeout 60 python3 -m gobrrr analyze "tests/data/traces/$t.json.gz" --json > $R/analyze-$t.json || echo "analyze $t FAILED"
done
timeout 150 python3 -m gobrrr doctor examples:attention --device cuda --json -q > $R/doctor-attention.json || echo "doctor attention FAILED"
timeout 200 python3 -m gobrrr doctor hf:gpt2 --train --batch-size 4 --seq-len 256 --device cuda --json -q > $R/doctor-gpt2_train_step.json || echo "doctor gpt2 train FAILED"
s analyze:attention $R/analyze-attention.json doctor:attention $R/doctor-attention.json \
  analyze:gpt2_train_step $R/analyze-gpt2_train_step.json doctor:gpt2_train_step $R/doctor-gpt2_train_step.json \
  analyze:gpt2_forward $R/analyze-gpt2_forward.json analyze:mlp_b1_forward $R/analyze-mlp_b1_forward.json \
  analyze:mlp_train_step $R/analyze-mlp_train_step.json analyze:pointwise_chain $R/analyze-pointwise_chain.json

echo "=== attention benchmark (calibration, doctor, CUDA-event ground truth, SDPA)"
OUT="$OUT" timeout 180 python3 benchmarks/attention_softmax.py 2>&1 | tail -8
mv "$OUT/attention-report.json" "$OUT/h200-calibrate.json" $R/ 2>/dev/null

echo "=== cuda + vision tests"
timeout 240 python3 -m pytest -q -p no:cacheprovider -m "cuda or vision" tests 2>&1 | tail -6
tar czf "$OUT/reports.tgz" -C $R .
ls -la "$OUT" "$OUT/traces"
