#!/usr/bin/env bash
# Create .venv and install tuner with its test extras. Idempotent: a second run only
# checks. The CPU build of PyTorch is installed first when no torch is present, so pip
# never pulls a multi-GB CUDA build on a machine without a GPU; GPU users who already
# have torch in the environment keep theirs (set TUNER_PYTHON to use another python).
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON="${TUNER_PYTHON:-python3}"
if [ ! -x .venv/bin/python ]; then
    "$PYTHON" -m venv .venv
fi
if ! .venv/bin/python -c "import torch" 2>/dev/null; then
    .venv/bin/pip install --quiet "torch==2.13.0"
fi
.venv/bin/pip install --quiet -e ".[test]"
