#!/usr/bin/env bash
# The optimize issue's real-model table, one sitting's worth of cases (GPU machine):
#   bash benchmarks/optimize_models.sh CASE [CASE ...]   (cases: optimize_models.py)
# Each side of each case runs in its own process from a cold Inductor and Triton cache.
# MAX_AUTOTUNE=1 adds compile(max-autotune) to the hand search. Results in $OUT/models/.
set -uo pipefail
export PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
OUT=${OUT:-out}; D="$OUT/models"; mkdir -p "$D"
for c in "$@"; do
  for side in hand gobrrr; do
    cache=$(mktemp -d)
    extra=()
    [ "$side" = hand ] && [ "${MAX_AUTOTUNE:-0}" = 1 ] && extra=(--max-autotune)
    TORCHINDUCTOR_CACHE_DIR="$cache/inductor" TRITON_CACHE_DIR="$cache/triton" \
      python3 benchmarks/optimize_models.py "$side" "$c" --out "$D" "${extra[@]}" 2>&1 \
      | grep -E "HAND BEST|GOBRRR BEST|ERROR|x  prep" | tee -a "$D/summary.txt"
    rm -rf "$cache"
  done
done
