#!/usr/bin/env bash
# gobrrr lab on the GPU machine (device tool): every experiment at full size, then the
# CUDA checks of tests/test_lab.py against that same run (GOBRRR_LAB_JSON), so the GPU
# time is spent once. Expected: lab ~1-2 min on an H200, checks a few seconds.
# Results, for docs/lab/h200/ (6 files, flat):
#   $OUT/lab/lab.json  lab.html  lab.svg  lab.png  lab.txt (versions, progress, conclusions)
#   $OUT/lab/pytest.txt
# Usage: OUT=/some/dir bash benchmarks/lab_gpu.sh
set -uo pipefail
export PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
OUT=${OUT:-out}
D="$OUT/lab"
mkdir -p "$D"
{
  date -u +%FT%TZ
  python3 -c "import torch, sys; print('torch', torch.__version__, 'cuda', torch.version.cuda, torch.cuda.get_device_name(0), 'python', sys.version.split()[0])"
} > "$D/lab.txt" 2>&1
start=$(date +%s)
# 210 s cap: the whole script must stay under 4 minutes of device time.
timeout 210 python3 -m gobrrr lab --device cuda --json --html "$D/lab.html" --out-dir "$D" \
  > "$D/lab.json" 2>> "$D/lab.txt"
rc=$?
echo "lab exit code $rc after $(( $(date +%s) - start )) s" >> "$D/lab.txt"
python3 - "$D/lab.json" >> "$D/lab.txt" 2>&1 <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
print(f"wall {d['wall_s']:.1f} s; errors: {d['errors'] or 'none'}")
for name, e in d["experiments"].items():
    print(f"{name} [{e['agrees_with_essay']}] ({e['elapsed_s']:.1f} s): {e['conclusion']}")
PY
GOBRRR_LAB_JSON="$D/lab.json" timeout 60 python3 -m pytest -q -p no:cacheprovider -m cuda \
  tests/test_lab.py > "$D/pytest.txt" 2>&1
echo "pytest exit code $?" >> "$D/lab.txt"
tail -n 12 "$D/lab.txt"
tail -n 3 "$D/pytest.txt"
