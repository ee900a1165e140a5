#!/usr/bin/env bash
# Session al's last device call: the once-logging filter (settings.once_logging_ignored)
# on torch 2.11, beside the same ignored set put in by hand without it.
#   OUT=... bash benchmarks/session_al_gpu.sh quiet
. benchmarks/gpu_preamble.sh session_al "$1"
for way in bare gobrrr; do
  python3 benchmarks/once_logging_quiet.py "$way" 2> "$OUT/quiet-$way.err" | tee -a "$OUT/quiet.jsonl"
  echo "$way: $(grep -c 'Unexpected exception logging' "$OUT/quiet-$way.err") lines on stderr"
done
