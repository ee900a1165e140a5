#!/usr/bin/env bash
# Session aj's device call (issue 24's training row), everything under $OUT:
#   OUT=$OUT bash benchmarks/session_aj_gpu.sh all      (about 330 s)
# - train_compile_variants.py: the hand's module compile against gobrrr's whole-step
#   compile of the same stack, two processes each, alternating (is the 4-9% gap
#   between the two searches on that row systematic?);
# - the CUDA-marked graph-replay tests, the paired (interleaved) timing among them;
# - doctor of the GPT-2 training step (8 x 256) with its experiments: the graph-replay
#   experiment now times eager and the replay interleaved.
# Second, after the variants read 5.27-5.38x in fresh processes (both searches 4.3-4.6x):
#   OUT=$OUT bash benchmarks/session_aj_gpu.sh soak     (about 180 s)
# - gobrrr's variant compiled beside another process's eager steps (as its child compiles
#   beside the search), then alone;
# - the hand's variant after 60 s of eager steps in its process, the GPU's clocks and
#   throttle reasons during and after (alone: `session_aj_gpu.sh soak_hand`).
. benchmarks/gpu_preamble.sh session_aj "$1"
q() { nvidia-smi --query-gpu=clocks.sm,clocks.mem,power.draw,temperature.gpu,clocks_throttle_reasons.active --format=csv,noheader; }
v=benchmarks/train_compile_variants.py
if [ "$1" = soak_hand ]; then  # the third part of soak alone (about 110 s)
  q; python3 $v one module 60 | tee "$OUT/soak_hand.jsonl" &
  sleep 45; q; wait; q
  exit 0
fi
if [ "$1" = soak ]; then
  TORCHINDUCTOR_CACHE_DIR=/tmp/ic_contended python3 $v one step_contended | tee "$OUT/soak.jsonl"
  TORCHINDUCTOR_CACHE_DIR=/tmp/ic_alone python3 $v one step | tee -a "$OUT/soak.jsonl"
  q; python3 $v one module 60 | tee -a "$OUT/soak.jsonl" &
  sleep 45; q; wait; q
  exit 0
fi
echo "== variants"
python3 benchmarks/train_compile_variants.py 2 | tee "$OUT/variants.jsonl"
echo "== tests"
python3 -m pytest -q -m cuda tests/test_graph_replay_optim.py -p no:cacheprovider 2>&1 | tail -3
echo "== doctor train"
python3 -m gobrrr doctor hf:gpt2 --batch-size 8 --seq-len 256 --train --json \
  > "$OUT/doctor-train.json" 2> "$OUT/doctor-train.err"
echo "rc=$?"; tail -3 "$OUT/doctor-train.err"
python3 - "$OUT/doctor-train.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
b, g = d["budget"], (d.get("experiments") or {}).get("graph_replay") or {}
print(f"T_wall {b['wall_s'] * 1e3:.2f} ms, busy {b.get('busy_s', 0) * 1e3:.2f} ms")
print("graph replay:", {k: g.get(k) for k in ("possible", "reason", "eager_s", "replay_s",
                                              "speedup", "predicted")})
for r in d.get("remedies", []):
    if r.get("predicted_speedup"):
        print(f"  {r['name']}: predicted {r['predicted_speedup']:.2f}")
PY
gzip -f "$OUT/doctor-train.json"
