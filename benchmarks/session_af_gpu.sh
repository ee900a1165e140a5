#!/usr/bin/env bash
# Session af's device call for what its CPU-only changes predict (written 2026-12-05 with
# no device lent; issue 24):
#   OUT=$OUT bash benchmarks/session_af_gpu.sh diag      (about 200 s)
# - doctor of the GPT-2 training step: the graph-replay experiment now captures it (Adam
#   made capturable for the capture, 9515c34): its replay against the profiled kernel
#   time (the H100's candidate replayed in ~59.5 ms against 48.9 ms of kernels);
# - doctor of BERT-base and GPT-2 8x512 cast to bf16: their kernel time against what the
#   bf16 cast's prediction gave them (on the H100 BERT's cast + graphs was predicted
#   6.51x and measured 3.76x, no faster than the cast alone);
# - the CUDA-marked test of the capture with AdamW; compile_cost.py on CUDA.
# The nine rows: `OUT=$OUT bash benchmarks/session_ad_rows.sh gobrrr CASE ...`.
# Session ag's part (issue 24's training row: 7.73x predicted, 4.44x measured on the H100):
#   OUT=$OUT bash benchmarks/session_af_gpu.sh compiled   (about 200 s)
# - doctor of the training row's winning stack with the whole step compiled (default
#   mode; benchmarks/diag_targets.py): is the compiled step's time in its kernels or
#   between them (the same stack without the compile: its autocast + graphs row, 17.7 ms);
# - doctor of BERT-base cast to bf16 with its graph-replay experiment (cast + graphs:
#   predicted 6.51x, measured 3.76x on the H100 in session ae).
. benchmarks/gpu_preamble.sh session_af "$1"
doctor() {  # doctor NAME TARGET ARGS...
  local name=$1; shift
  echo "== doctor $name: $*"
  python3 -m gobrrr doctor "$@" --json > "$OUT/doctor-$name.json" 2> "$OUT/doctor-$name.err"
  echo "rc=$?"; tail -2 "$OUT/doctor-$name.err"
  python3 - "$OUT/doctor-$name.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
b, g = d["budget"], (d.get("experiments") or {}).get("graph_replay") or {}
print(f"T_wall {b['wall_s'] * 1e3:.2f} ms, busy {b.get('busy_s', 0) * 1e3:.2f} ms, "
      f"fractions {d['fractions']}, host issue {b.get('host_issue_s')}")
print("graph replay:", {k: g.get(k) for k in ("possible", "reason", "eager_s", "replay_s",
                                              "speedup")})
for part in ("per_phase", "per_class"):
    print(f"  {part}:", ", ".join(f"{c['name']} {c['calls']} calls {c['time_s'] * 1e3:.2f} ms"
                               for c in sorted(b.get(part) or [], key=lambda c: -c['time_s'])[:8]))
for r in d.get("remedies", []):
    print(f"  {r['name']}: predicted {r.get('predicted_speedup')}; {(r.get('basis') or '')[:300]}")
PY
}
case "$1" in
  diag)
    timeout 120 python3 -m pytest -q -m cuda tests/test_graph_replay_optim.py 2>&1 | tail -3
    # a compiled call's host cost on this GPU's host (calibrated on CPU only so far;
    # the H100's reduce-overhead wrapper: ~1-1.4 us per tensor)
    python3 -c "from gobrrr.compile_cost import compiled_call_costs as c
print('compiled call, per tensor (s):', c('cuda', 0.5))"
    doctor train hf:gpt2 --batch-size 8 --seq-len 256 --train
    doctor bert_bf16 hf:bert-base-uncased --batch-size 32 --seq-len 128 --dtype bf16 \
      --no-experiments
    doctor bert_fp32 hf:bert-base-uncased --batch-size 32 --seq-len 128 --no-experiments
    doctor gpt2_bf16 hf:gpt2 --batch-size 8 --seq-len 512 --dtype bf16 --no-experiments
    ;;
  compiled|train_compiled)  # train_compiled: the training step alone
    # No experiments: their 2x and 4x batches compile the step twice more, and session
    # ah's call (timeout 200) was still in the profiled count after them.
    doctor train_compiled benchmarks/diag_targets.py:gpt2_train_compiled --no-experiments \
      --time-budget 1
    # the same step under reduce-overhead: replayed kernels against the host left
    # between its graphs (session ai: default 31.1 ms a call, 8.6 ms of kernels)
    doctor train_compiled_ro benchmarks/diag_targets.py:gpt2_train_compiled_ro \
      --no-experiments --time-budget 1
    [ "$1" = compiled ] && doctor bert_bf16_graphs hf:bert-base-uncased --batch-size 32 \
      --seq-len 128 --dtype bf16
    ;;
  *) echo "unknown part $1"; exit 2 ;;
esac
