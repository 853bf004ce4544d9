#!/usr/bin/env bash
# Download, into .whl/ (ignored by git), the wheels scripts/gpu-check.sh installs on a GPU
# machine whose Python has torch and triton but not tuner's pure-Python dependencies
# (the lent H200: Python 3.12, x86-64). The versions are those this checkout's .venv uses.
set -euo pipefail
cd "$(dirname "$0")/.."
grep -qx '/.whl/' .git/info/exclude 2>/dev/null || echo '/.whl/' >> .git/info/exclude
versions=$(.venv/bin/pip list --format=freeze 2>/dev/null \
    | grep -iE '^(pydantic|pydantic[-_]core|annotated[-_]types|typing[-_]inspection|typing[-_]extensions|sqlalchemy|greenlet)==' )
python3 -m pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_24_x86_64 \
    --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 --platform manylinux1_x86_64 \
    -d .whl $versions
ls -la .whl
