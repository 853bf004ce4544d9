#!/usr/bin/env bash
# Create .venv and install tuner with its test extras. Idempotent: a second run only
# checks. The CPU build of PyTorch is installed first when no torch is present, so pip
# never pulls a multi-GB CUDA build on a machine without a GPU; GPU users who already
# have torch in the environment keep theirs (set TUNER_PYTHON to use another python).
# Nothing is installed outside .venv, except with --tests: the dashboard's browser test
# then gets Debian's chromium (apt, about 290 MB, as root) when it is missing.
set -euo pipefail
cd "$(dirname "$0")/.."
TESTS=0
for arg in "$@"; do
    case "$arg" in
        --tests) TESTS=1 ;;
        *) echo "setup-env: unknown option $arg (known: --tests)" >&2; exit 2 ;;
    esac
done
PYTHON="${TUNER_PYTHON:-python3}"
# The pip steps take a minute or two in all. On a terminal a line before each says what
# it installs and pip stays quiet; elsewhere (a log, CI), where silence looks hung, pip
# prints its own lines too (Collecting ..., Installing ...), without progress bars.
if [ -t 2 ]; then PIP_OUTPUT=(--quiet); else PIP_OUTPUT=(--progress-bar off); fi
pip_install() { # WHAT, then pip's arguments
    echo "setup-env: installing $1" >&2
    shift
    .venv/bin/pip install "${PIP_OUTPUT[@]}" "$@"
}
if [ ! -x .venv/bin/python ]; then
    "$PYTHON" -m venv .venv
fi
if ! .venv/bin/python -c "import torch" 2>/dev/null; then
    pip_install "PyTorch's CPU build (the largest download: about a minute)" "torch==2.13.0"
fi
pip_install "tuner and its test extras (about a minute on a first run, seconds after)" -e ".[test]"
# The dashboard's browser test drives Debian's chromium through playwright-python (the
# package only: never `playwright install`, which downloads browsers).
if [ "$TESTS" -eq 1 ] && [ ! -x /usr/bin/chromium ]; then
    if [ "$(id -u)" -eq 0 ]; then
        apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null \
            || { echo "setup-env: apt-get install chromium failed" >&2; exit 1; }
    else
        echo "setup-env: /usr/bin/chromium is missing and we are not root: install it (apt-get install chromium)" >&2
    fi
fi
.venv/bin/python -c "import playwright" 2>/dev/null || pip_install "playwright-python (seconds)" playwright
