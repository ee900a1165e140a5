# Sourced by the session scripts' parts (benchmarks/session_*_gpu.sh) on the GPU machine:
#   . benchmarks/gpu_preamble.sh TAG PART
# $OUT made, everything after logged to $OUT/TAG-PART.log, the carried ijson wheel
# installed aside, gobrrr's source on PYTHONPATH, the GPU and the torch stack printed.
set -uo pipefail
OUT=${OUT:-out}; mkdir -p "$OUT"
exec > >(tee "$OUT/$1-$2.log") 2>&1
python3 -m pip install -q --no-deps --target /tmp/pylib .gpu_wheels/ijson-*.whl 2>&1 | tail -1
export PYTHONPATH="$PWD/src:/tmp/pylib${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
python3 -c "import torch, transformers; print(torch.__version__, transformers.__version__)"
