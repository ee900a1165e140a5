#!/usr/bin/env bash
# The next session's GPU runs (the last stops had no device time): what changed on CPU
# and needs its CUDA proof. One part per device call (each call has 600 s at most):
#   OUT=$OUT bash benchmarks/next_gpu.sh tests|plain|generate|lightning|memory
# tests:     every cuda- or vision-marked test (generation, run, the rest);
# plain:     issue 23: plain traces (no schedule, no prof.step()) of eager and compiled
#            workloads, analyze beside doctor (benchmarks/plain_traces_gpu.py; traces and
#            plain_traces.json under $OUT/plain);
# generate:  benchmarks/generate_gpu.py (GPT-2 small, TinyLlama-1.1B, bf16, batch 1 and
#            8, plain and static cache) and `doctor --generate 64` on both (size, time);
# lightning: a Lightning run with the callback on CUDA (the closure split read from a
#            CUDA trace, where backward runs on the engine's device threads);
# memory:    `gobrrr memory` on GPT-2 small training (three batches) and ResNet-50
#            training: MemTracker's peak beside torch.cuda.max_memory_allocated.
# ijson travels as a wheel (.gpu_wheels/, carried): the machine has none.
set -uo pipefail
OUT=${OUT:-out}; mkdir -p "$OUT"
part=${1:?tests, plain, generate, lightning or memory}
exec > >(tee "$OUT/next_gpu-$part.log") 2>&1
python3 -m pip install -q --no-deps --target /tmp/pylib .gpu_wheels/ijson-*.whl 2>&1 | tail -1
export PYTHONPATH="$PWD/src:/tmp/pylib${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
stamp() { echo "=== $1 ($(date -u +%FT%TZ))"; }
case "$part" in
tests)
  stamp "cuda tests"
  timeout 540 python3 -m pytest -q -p no:cacheprovider -m "cuda or vision" tests 2>&1 | grep -v USDT | grep -e "^E " -e passed -e failed | tail -12
  ;;
plain)
  stamp "plain traces (issue 23)"
  timeout 560 python3 benchmarks/plain_traces_gpu.py "$OUT/plain" 2>&1 | grep -v -e USDT -e Warn | tail -20
  ;;
generate)
  stamp "generate_gpu.py"
  timeout 300 python3 benchmarks/generate_gpu.py --out "$OUT/generate_gpu.json" 2>&1 | grep -v -e USDT -e Warn | tail -12
  for m in gpt2 tinyllama-1.1b; do
    stamp "doctor hf:$m --generate 64 --dtype bf16"
    /usr/bin/time -f "doctor --generate $m wall %e s" timeout 120 python3 -m gobrrr doctor "hf:$m" --generate 64 \
      --seq-len 128 --dtype bf16 --json -q > "$OUT/doctor-generate-$m.json" 2> /tmp/g.err || tail -5 /tmp/g.err
    ls -l "$OUT/doctor-generate-$m.json"
  done
  ;;
lightning)
  stamp "lightning callback on CUDA"
  timeout 300 python3 - "$OUT" <<'PY'
import json, sys, torch, lightning as L
from torch import nn
from gobrrr.integrations.lightning import GobrrrCallback
class M(L.LightningModule):
    def __init__(self):
        super().__init__(); self.net = nn.Sequential(nn.Linear(1024, 4096), nn.GELU(), nn.Linear(4096, 1024))
    def training_step(self, b, i): return self.net(b[0]).square().mean()
    def configure_optimizers(self): return torch.optim.AdamW(self.parameters())
ds = torch.utils.data.TensorDataset(torch.randn(4096, 1024))
cb = GobrrrCallback(json=f"{sys.argv[1]}/lightning-cuda.json", print_report=False)
L.Trainer(max_steps=40, accelerator="gpu", devices=1, logger=False, enable_checkpointing=False,
          enable_progress_bar=False, callbacks=[cb]).fit(M(), torch.utils.data.DataLoader(ds, batch_size=64))
d = json.load(open(f"{sys.argv[1]}/lightning-cuda.json"))
print("regime", d["regime"], {k: round(v["share"], 3) for k, v in d["phases"].items()})
PY
  ;;
memory)
  for b in 4 8 16; do
    stamp "memory hf:gpt2 --train --batch-size $b --seq-len 512"
    timeout 120 python3 -m gobrrr memory hf:gpt2 --train --batch-size $b --seq-len 512 --device cuda \
      --json -q > "$OUT/memory-gpt2-b$b.json" || echo "failed: $?"
  done
  for b in 32 64; do
    stamp "memory torchvision:resnet50 --train --batch-size $b"
    timeout 120 python3 -m gobrrr memory torchvision:resnet50 --train --batch-size $b --device cuda \
      --json -q > "$OUT/memory-resnet50-b$b.json" || echo "failed: $?"
  done
  stamp "memory hf:gpt2 --train --batch-size 8 --seq-len 512 --fit (checked on CUDA)"
  timeout 200 python3 -m gobrrr memory hf:gpt2 --train --batch-size 8 --seq-len 512 --device cuda \
    --fit --json -q > "$OUT/memory-fit-gpt2.json" || echo "failed: $?"
  python3 - "$OUT" <<'PY'
import glob, json, sys
fit = json.load(open(f"{sys.argv[1]}/memory-fit-gpt2.json")).get("fit") or {}
print("fit", fit.get("predicted_max_batch"), fit.get("checked"))
for f in sorted(glob.glob(f"{sys.argv[1]}/memory-*b*.json")):
    d = json.load(open(f)); a = d.get("allocator") or {}
    print(f.split("/")[-1], d["peak_bytes"], a.get("max_allocated_bytes"),
          round(d["peak_bytes"] / a["max_allocated_bytes"], 3) if a.get("max_allocated_bytes") else None)
PY
  ;;
*) echo "unknown part $part"; exit 2 ;;
esac
