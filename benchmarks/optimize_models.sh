#!/usr/bin/env bash
# The optimize issue's real-model table, one sitting's worth of cases (GPU machine):
#   bash benchmarks/optimize_models.sh CASE [CASE ...]   (cases: optimize_models.py)
# Each side of each case runs in its own process from a cold Inductor and Triton cache.
# MAX_AUTOTUNE=1 adds compile(max-autotune) to the hand search. Results in $OUT/models/.
# BUDGET=60: gobrrr's --budget-s (120 by default). SIDES=hand|gobrrr: that side alone.
# PARALLEL=1 (a machine of 2 GPUs): the hand side on GPU 0 and gobrrr on GPU 1 at once,
# halving the device time of a row; they share the host's CPUs (Inductor's compile
# workers too), so compile times may run longer than alone: said in summary.txt.
set -uo pipefail
export PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
OUT=${OUT:-out}; D="$OUT/models"; mkdir -p "$D"
side() {  # side CASE hand|gobrrr [GPU]
  local cache; cache=$(mktemp -d)
  local extra=()
  [ "$2" = hand ] && [ "${MAX_AUTOTUNE:-0}" = 1 ] && extra=(--max-autotune)
  [ "$2" = gobrrr ] && extra=(--budget-s "${BUDGET:-120}")
  CUDA_VISIBLE_DEVICES=${3:-${CUDA_VISIBLE_DEVICES:-0}} \
  TORCHINDUCTOR_CACHE_DIR="$cache/inductor" TRITON_CACHE_DIR="$cache/triton" \
    python3 benchmarks/optimize_models.py "$2" "$1" --out "$D" "${extra[@]}" 2>&1 \
    | grep -E "HAND BEST|GOBRRR BEST|ERROR|x  prep" | tee -a "$D/summary.txt"
  rm -rf "$cache"
}
for c in "$@"; do
  if [ "${SIDES:-both}" != both ]; then side "$c" "$SIDES"; continue; fi
  if [ "${PARALLEL:-0}" = 1 ]; then
    echo "$c: hand on GPU 0 and gobrrr on GPU 1 at once (shared host CPUs)" >> "$D/summary.txt"
    side "$c" hand 0 & side "$c" gobrrr 1 & wait
  else
    side "$c" hand; side "$c" gobrrr
  fi
done
