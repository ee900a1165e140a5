#!/usr/bin/env bash
# The HTML report of a real GPU run, for docs/ (run on the GPU machine, no pip install):
#   OUT=/some/dir bash benchmarks/report_gpu.sh
# Writes at most 4 files under $OUT/rep/: gpt2.json, gpt2.html, gpt2.trace.json and
# resnet50.html; prints checks on stdout. About 2 minutes on an H200.
set -uo pipefail
export PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
OUT=${OUT:-out}; R="$OUT/rep"; mkdir -p "$R"
python3 -c "import torch, sys; print('torch', torch.__version__, 'cuda', torch.version.cuda, torch.cuda.get_device_name(0), 'python', sys.version.split()[0])"

# GPT-2 small, 8 x 512 tokens: the report committed in docs/.
/usr/bin/time -f "doctor gpt2 wall %e s" timeout 120 python3 -m gobrrr doctor \
  benchmarks/validate.py:gpt2_large --device cuda --json \
  --html "$R/gpt2.html" --trace "$R/gpt2.trace.json" > "$R/gpt2.json" 2> /tmp/gpt2.err \
  || { echo "doctor gpt2 FAILED"; grep -v USDT /tmp/gpt2.err | tail -20; }
grep -v USDT /tmp/gpt2.err | tail -5

# ResNet-50, batch 64: a second, convolutional workload (HTML only; cache keeps the
# ceilings, so no second calibration).
/usr/bin/time -f "doctor resnet50 wall %e s" timeout 60 python3 -m gobrrr doctor \
  benchmarks/report_targets.py:resnet50 --device cuda -q --json \
  --html "$R/resnet50.html" > /tmp/resnet50.json 2> /tmp/resnet50.err \
  || { echo "doctor resnet50 FAILED (torchvision missing?)"; grep -v USDT /tmp/resnet50.err | tail -5; }

python3 - "$R" <<'PY'
import json, sys
from pathlib import Path
from gobrrr.schema import validate
r = Path(sys.argv[1])
try:
    import jsonschema  # noqa: F401
    how = "full JSON Schema"
except ImportError:
    how = "minimal check (no jsonschema here)"
for p in (r / "gpt2.json", Path("/tmp/resnet50.json")):
    if not p.exists() or not p.stat().st_size:
        print(p, "missing"); continue
    d = json.loads(p.read_text())
    validate(d)
    print(p.name, "valid,", how, "|", d["regime"], {k: round(v, 3) for k, v in d["fractions"].items()})
    for line in d["verdict"]["evidence"]:
        print("   ", line)
t = r / "gpt2.trace.json"
if t.exists():
    tr = json.loads(t.read_text())
    x = [e for e in tr["traceEvents"] if e["ph"] == "X"]
    print("trace:", len(x), "events;", {k: v for k, v in tr["otherData"].items()
                                        if "kernel" in k or "timeline" in k})
PY
python3 -m gobrrr compare "$R/gpt2.json" "$R/gpt2.json" > /dev/null && echo "compare gpt2 vs itself: exit 0"
ls -la "$R"
