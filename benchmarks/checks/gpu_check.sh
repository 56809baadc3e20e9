#!/usr/bin/env bash
# The GPU check, prepared to finish within 15 minutes on one H200 (run from anywhere):
#
#   benchmarks/checks/gpu_check.sh                 # CUDA: parity tests + ~1B/~4B/~8B timings
#   benchmarks/checks/gpu_check.sh --device cpu    # the same on the CPU with a tiny config (CI)
#
# 1. prints the device; 2. runs the engine parity tests (pytest, 240 s cap; on CUDA the `gpu`
# tests run flex in fp32 and bf16 on the device); 3. runs benchmarks/checks/gpu_check.py (570 s cap,
# its own timing budget 480 s), which checks parity on the device per dtype, times the models,
# writes benchmarks/results/gpu-<date>.json and prints a short table last.
set -uo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-.venv/bin/python}
export HF_HUB_OFFLINE=1
command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv
"$PY" -c "import torch; print('torch', torch.__version__, 'cuda', torch.cuda.is_available(), torch.cuda.get_device_name(0) if torch.cuda.is_available() else '')"
timeout 240 "$PY" -m pytest tests/engine/test_parity.py tests/engine/test_gpu_path.py -m "not slow" -q -x -p no:cacheprovider
tests=$?
timeout 570 "$PY" benchmarks/checks/gpu_check.py "$@"
bench=$?
echo "pytest exit $tests, gpu_check exit $bench"
[ "$tests" -eq 0 ] && [ "$bench" -eq 0 ]
