#!/usr/bin/env bash
# One sitting on nvidia-h200-x2 (device time is scarce: one call, under 10 minutes):
# the distributed doctor on the DDP examples (benchmarks/dist_gpu.sh), the communication
# ceilings and projection check (dist_calibrate.sh), then single-GPU leftovers given as
# extra commands in $EXTRA. Packs results into few files (the device tool returns <= 8).
set -u
export PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
R=${OUT:-out}; O=$(mktemp -d); mkdir -p "$O/dist" "$O/cal"
(OUT=$O/dist PY=python3 timeout "${DIST_S:-300}" bash benchmarks/dist_gpu.sh) 2>&1 | tail -20
[ -n "${EXTRA:-}" ] && (cd "$PWD" && OUT=$O timeout "${EXTRA_S:-100}" bash -c "$EXTRA") 2>&1 | tail -20
(OUT=$O/cal timeout "${CAL_S:-170}" bash benchmarks/dist_calibrate.sh) 2>&1 | tail -40
for t in "$O"/dist/traces_*; do [ -d "$t" ] && tar czf "$R/$(basename "$t").tgz" -C "$O/dist" "$(basename "$t")"; done
rm -rf "$O"/dist/traces_*
tar czf "$R/results.tgz" -C "$O" .
ls -la "$R"
