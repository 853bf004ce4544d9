#!/usr/bin/env bash
# The prepared GPU check: what a lent GPU's few minutes should measure, at most 8 minutes,
# each step in a process of its own with its own time limit, its results saved the moment
# it ends, so a step that fails or a machine taken back early still leaves the others' data.
#
#   bash scripts/gpu-check.sh [--dry-run] [OUT_DIR]   # OUT_DIR default: $OUT if set, else benchmarks/data
#
# Writes OUT_DIR/gpu_check_<device>_<date>.json: device, driver, versions and date, then per
# step its status, wall time, result and log tail (a rerun the same day amends it). After a
# 20 s environment step, the steps (benchmarks/gpu_check.py says more), 480 s in all:
#   (a) family_latency   the bundled kernel families at the shipped problems' shapes, CUDA-graph
#                        timed with a cold L2, beside their modeled latency              85 s
#   (b) gpu_sharing      waves on free SMs, no preemption, beside a holder kernel         55 s
#   (c) replays          tuner replay --device cuda --compare: seed_example heavy, lean and fast
#                        (10 s each); llm_decode light and heavy, the stored table's configs and
#                        the per-bucket isolated-fastest ones (20 s each)     2 x 30 + 80 + 3 x 60 s
# --dry-run runs every step on the CPU through benchmarks/cuda_standin.py (a torch.cuda that
# records each call); the test suite runs it (tests/test_gpu_check.py). Without a CUDA GPU and
# without --dry-run it prints one line and exits 0.
#
# On a machine that lacks tuner's pure-Python dependencies (the lent GPU's image has torch
# and triton but not pydantic or sqlalchemy), carry wheels in .whl/ (make them here with
# `bash scripts/gpu-check-wheels.sh`, which needs pip and the network): they are installed
# into a scratch directory first. Nothing is installed into the machine's own Python.
set -uo pipefail
cd "$(dirname "$0")/.."
DRY=()
if [ "${1:-}" = "--dry-run" ]; then DRY=(--dry-run); shift; fi
OUT_DIR="${1:-${OUT:-benchmarks/data}}"
PYTHON="${TUNER_PYTHON:-python3}"
if [ ${#DRY[@]} -eq 0 ] && ls .whl/*.whl >/dev/null 2>&1; then
    "$PYTHON" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/tuner-site \
        .whl/*.whl && export PYTHONPATH="/tmp/tuner-site${PYTHONPATH:+:$PYTHONPATH}"
fi
export PYTHONUNBUFFERED=1 TUNER_PYTHON="$PYTHON"
[ ${#DRY[@]} -eq 0 ] && command -v nvidia-smi >/dev/null && \
    nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,memory.total --format=csv
exec "$PYTHON" benchmarks/gpu_check.py ${DRY[@]+"${DRY[@]}"} --out-dir "$OUT_DIR"
