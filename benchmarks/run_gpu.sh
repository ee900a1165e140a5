#!/usr/bin/env bash
# Issue 22 (`gobrrr run`) on the GPU machine; results in $OUT/results.tgz and the log.
#   OUT=/some/dir bash benchmarks/run_gpu.sh [gpt2] [resnet] [overhead]   (default: all)
# 1. the CUDA test of tests/test_run.py;
# 2. gpt2: GPT-2 training (run_scripts/train_gpt2.py) under `gobrrr run` beside doctor of
#    the same step (run_scripts/targets.py:gpt2_train); then with --deterministic, plain
#    twice and under gobrrr run: what it computed (loss, hash of every parameter) compared;
# 3. resnet: ResNet-50 training with a slow host-side input pipeline (train_resnet.py)
#    under `gobrrr run`, then plain with 0 workers and with the suggested workers: the top
#    remedy's measured gain beside its prediction; each run's own per-step waits;
# 4. overhead: the overhead outside the window, GPT-2 for 200 steps, plain and under
#    gobrrr run (its window ends by step ~28), steps/s from step 60 on, alternated.
# ijson travels as a wheel (.gpu_wheels/, carried): the machine has none.
set -uo pipefail
OUT=${OUT:-out}; mkdir -p "$OUT"
R=/tmp/run_gpu; rm -rf "$R"; mkdir -p "$R"
exec > >(tee "$OUT/run_gpu.log") 2>&1
python3 -m pip install -q --no-deps --target /tmp/pylib .gpu_wheels/ijson-*.whl 2>&1 | tail -1
export PYTHONPATH="$PWD/src:/tmp/pylib${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
python3 -c "import torch, sys, os, ijson; print('torch', torch.__version__, torch.cuda.get_device_name(0), 'python', sys.version.split()[0], 'ijson', ijson.backend, 'cpus', len(os.sched_getaffinity(0)))"
S=benchmarks/run_scripts
STAGES=${*:-gpt2 resnet overhead}
stamp() { echo "=== $1 ($(date -u +%FT%TZ))"; }
quiet() { grep -v -e USDT -e "^gobrrr:" "$1" | tail -"${2:-6}"; }
grun() { python3 -m gobrrr run "$@"; }

stamp "cuda test"
timeout 240 python3 -m pytest -q -p no:cacheprovider -m cuda tests/test_run.py 2>&1 | grep -v USDT | grep -e "^E " -e passed -e failed | tail -6
stamp "calibrate"
timeout 120 python3 -m gobrrr calibrate --device cuda -q > /dev/null && echo calibrated

if [[ " $STAGES " == *" gpt2 "* ]]; then
  stamp "gpt2: gobrrr run beside doctor"
  /usr/bin/time -f "gobrrr run gpt2 wall %e s" timeout 200 python3 -m gobrrr run --json "$R/run-gpt2.json" \
    --html "$R/run-gpt2.html" $S/train_gpt2.py --steps 40 > "$R/run-gpt2.txt" 2> "$R/run-gpt2.err" || quiet "$R/run-gpt2.err" 20
  timeout 200 python3 -m gobrrr doctor $S/targets.py:gpt2_train --device cuda --json -q \
    > "$R/doctor-gpt2_train.json" 2> /tmp/doc.err || quiet /tmp/doc.err 20
  python3 benchmarks/summarize_report.py run-gpt2 "$R/run-gpt2.json" doctor-gpt2_train "$R/doctor-gpt2_train.json"
  python3 benchmarks/summarize_run.py "$R/run-gpt2.json"
  stamp "gpt2 --deterministic: plain x2, gobrrr run"
  for n in plain1 plain2; do
    timeout 150 python3 $S/train_gpt2.py --deterministic --steps 30 --out "$R/det-$n.json" > /tmp/p.txt 2>&1 || quiet /tmp/p.txt
  done
  timeout 200 python3 -m gobrrr run -q --json "$R/run-gpt2-det.json" $S/train_gpt2.py --deterministic --steps 30 \
    --out "$R/det-run.json" > /dev/null 2> /tmp/det.err || quiet /tmp/det.err 20
  python3 - "$R" <<'PY'
import json, sys
o = sys.argv[1]
a, b, r = (json.load(open(f"{o}/det-{n}.json")) for n in ("plain1", "plain2", "run"))
print("deterministic: plain1 == plain2:", a == b, "| plain1 == gobrrr run:", a == r, "|", a, r)
PY
fi

if [[ " $STAGES " == *" resnet "* ]]; then
  stamp "resnet50, slow input pipeline: gobrrr run, then plain with 0 and N workers"
  /usr/bin/time -f "gobrrr run resnet wall %e s" timeout 240 python3 -m gobrrr run --json "$R/run-resnet.json" \
    --html "$R/run-resnet.html" $S/train_resnet.py --steps 40 --timing-out "$R/resnet-run.json" > "$R/run-resnet.txt" \
    2> "$R/run-resnet.err" || quiet "$R/run-resnet.err" 20
  python3 benchmarks/summarize_run.py "$R/run-resnet.json"
  W=$(python3 -c "import json, re; d=json.load(open('$R/run-resnet.json')); r=[x for x in d['remedies'] if x['spec']=='dataloader_workers']; print(re.search(r'num_workers=(\d+)', r[0]['how']).group(1) if r else 8)")
  for w in 0 "$W"; do
    timeout 200 python3 $S/train_resnet.py --steps 40 --num-workers "$w" --timing-out "$R/resnet-workers$w.json" > /tmp/rw.txt 2>&1 || quiet /tmp/rw.txt
  done
  python3 - "$R" "$W" <<'PY'
import json, statistics as st, sys
o, w = sys.argv[1], sys.argv[2]
run, p0, pw = (json.load(open(f"{o}/{n}.json")) for n in ("resnet-run", "resnet-workers0", f"resnet-workers{w}"))
rep = json.load(open(f"{o}/run-resnet.json"))
pred = next(r["predicted_speedup"] for r in rep["remedies"] if r["spec"] == "dataloader_workers")
med = lambda xs: st.median(xs) * 1e3
print(f"plain step (from step 5): 0 workers {p0['step_s'] * 1e3:.1f} ms, {w} workers {pw['step_s'] * 1e3:.1f} ms: measured {p0['step_s'] / pw['step_s']:.2f}x, predicted {pred:.2f}x")
print(f"the script's own wait, median of steps 3-22 (gobrrr's window) / 28-39 (after): plain {med(p0['waits_s'][3:23]):.1f} / {med(p0['waits_s'][28:]):.1f} ms, under gobrrr run {med(run['waits_s'][3:23]):.1f} / {med(run['waits_s'][28:]):.1f} ms; gobrrr's T_wall {rep['budget']['wall_s'] * 1e3:.1f} ms, wait {rep['data_loading']['host_s'] * 1e3:.1f} ms")
PY
fi

if [[ " $STAGES " == *" overhead "* ]]; then
  stamp "overhead outside the window: gpt2 200 steps, steps/s from step 60"
  for i in 1 2; do
    timeout 150 python3 $S/train_gpt2.py --steps 200 --time-from 60 --timing-out "$R/over-plain$i.json" > /dev/null 2>&1
    timeout 200 python3 -m gobrrr run -q $S/train_gpt2.py --steps 200 --time-from 60 --timing-out "$R/over-run$i.json" > /dev/null 2>&1
    echo "round $i: plain $(cat "$R/over-plain$i.json" 2>/dev/null) run $(cat "$R/over-run$i.json" 2>/dev/null)"
  done
fi
stamp "done"
tar -C "$R" -czf "$OUT/results.tgz" .
