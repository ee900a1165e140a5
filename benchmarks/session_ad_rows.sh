#!/usr/bin/env bash
# Session ad's device calls (issue 24): one side of the named rows at --budget-s 60, on
# the search that holds the runner-up while the best waits to be timed again (quiet.py).
#   bash benchmarks/session_ad_rows.sh gobrrr|hand|both CASE [CASE ...]
# Everything under $OUT; the models folder tarred after each row (8 files come back).
. benchmarks/gpu_preamble.sh session_ad "$1"
side=$1; shift
for c in "$@"; do
  if [ "$side" = both ]; then
    BUDGET=60 bash benchmarks/optimize_models.sh "$c"
  else
    BUDGET=60 SIDES="$side" bash benchmarks/optimize_models.sh "$c"
  fi
  (cd "$OUT" && tar czf "models-$side.tgz" models)
done
rm -rf "$OUT/models"
