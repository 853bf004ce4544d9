#!/usr/bin/env bash
# The prepared GPU check: what a lent GPU's few minutes should measure, each step with its
# own time limit and its record saved the moment it is written, so a step that fails or a
# machine taken back early still leaves the others' data.
#
#   bash scripts/gpu-check.sh [OUT_DIR]      # default: $OUT if set, else benchmarks/data
#
# Steps (each: the script, its limit):
#   1. benchmarks/gpu_sharing.py     -- waves on free SMs, no preemption (H200: ~10 s)       180 s
#   2. benchmarks/gpu_gemm_decode.py -- the matmul kernels at Llama-2-7B's GEMM shapes, beside
#                                       the analytic model, cuBLAS and the roofline            240 s
#   3. tuner replay seed_example, heavy regime, lean then fast (--device cuda --compare --json:
#      spin kernels on 8 streams, measured beside simulated; the seed's claim)  90 s each
#      (its JSON in OUT_DIR/replay_seed_example_heavy_<config>.log; the replay's first GPU run)
# Without a CUDA GPU each step prints one line (the replays are skipped) and the script exits 0.
#
# On a machine that lacks tuner's pure-Python dependencies (the lent H200's image has torch
# and triton but not pydantic or sqlalchemy), carry wheels in .whl/ (make them here with
# `bash scripts/gpu-check-wheels.sh`, which needs pip and the network): they are installed
# into a scratch directory first. Nothing is installed into the machine's own Python.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT_DIR="${1:-${OUT:-benchmarks/data}}"
mkdir -p "$OUT_DIR"
PYTHON="${TUNER_PYTHON:-python3}"
if ls .whl/*.whl >/dev/null 2>&1; then
    "$PYTHON" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/tuner-site \
        .whl/*.whl && export PYTHONPATH="/tmp/tuner-site${PYTHONPATH:+:$PYTHONPATH}"
fi
export PYTHONUNBUFFERED=1
command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,memory.total --format=csv
status=0
run_step() { # NAME LIMIT_S SCRIPT ARGS...
    local name=$1 limit=$2
    shift 2
    echo "gpu-check: $name (limit ${limit} s)"
    timeout "$limit" "$PYTHON" "$@" 2>&1 | tee "$OUT_DIR/$name.log"
    local rc=${PIPESTATUS[0]}
    [ "$rc" -eq 0 ] || { echo "gpu-check: $name ended with $rc (its record keeps what it measured)"; status=1; }
}
run_step gpu_sharing 180 benchmarks/gpu_sharing.py --out "$OUT_DIR/gpu_sharing_measured.json"
run_step gpu_gemm_decode 240 benchmarks/gpu_gemm_decode.py --out "$OUT_DIR/gpu_gemm_decode_measured.json"
if "$PYTHON" -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)" 2>/dev/null; then
    for config in lean fast; do
        run_step "replay_seed_example_heavy_$config" 90 -m tuner replay seed_example --regime heavy \
            --assign "stage=$config" --duration 10 --device cuda --compare --json
    done
else
    echo "gpu-check: replay skipped: no CUDA GPU"
fi
exit $status
