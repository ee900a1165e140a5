#!/usr/bin/env bash
# This session's second GPU call: the CUDA tests with their failures in full, then the
# generation rows and `doctor --generate` after the GQA FLOP and the compiled-hook fixes.
set -uo pipefail
OUT=${OUT:-out}; mkdir -p "$OUT"
python3 -m pip install -q --no-deps --target /tmp/pylib .gpu_wheels/ijson-*.whl 2>&1 | tail -1
export PYTHONPATH="$PWD/src:/tmp/pylib${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
timeout 200 python3 -m pytest -q -p no:cacheprovider -rf --tb=short -m "cuda or vision" tests \
  > "$OUT/tests.txt" 2>&1; tail -4 "$OUT/tests.txt"; grep "^FAILED" "$OUT/tests.txt"
bash benchmarks/next_gpu.sh generate > /dev/null 2>&1
tail -14 "$OUT/next_gpu-generate.log" | grep -v -e W1201 -e "^\s*File" -e "^\s*\^"
