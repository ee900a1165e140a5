#!/usr/bin/env bash
# This session's third GPU call: the failed-capture generator fix (the CUDA tests of
# test_diagnose, then test_generation's CUDA test, which ran after them and failed).
set -uo pipefail
OUT=${OUT:-out}; mkdir -p "$OUT"
python3 -m pip install -q --no-deps --target /tmp/pylib .gpu_wheels/ijson-*.whl 2>&1 | tail -1
export PYTHONPATH="$PWD/src:/tmp/pylib${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
timeout 300 python3 -m pytest -q -p no:cacheprovider -rf --tb=short -m cuda \
  tests/test_diagnose.py tests/test_generation.py tests/test_compiled.py > "$OUT/tests2.txt" 2>&1
grep -e "^FAILED" -e "^E " "$OUT/tests2.txt" | head -20; tail -1 "$OUT/tests2.txt"
