#!/usr/bin/env bash
# Prints the path of the virtual environment holding the pinned torch (fixtures/requirements*.txt)
# that the differential harness and the Python suite share, making it on first use under
# target/ci-tools (a large download: torch and its CUDA libraries). Needs python3 with venv.
# TENSORPLAY_TORCH_VENV names an existing environment with that torch to use instead.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

if [ -n "${TENSORPLAY_TORCH_VENV:-}" ]; then
    echo "$(cd "$TENSORPLAY_TORCH_VENV" && pwd)"
    exit 0
fi

venv=target/ci-tools/differential-venv
# joblib and lz4 (fixtures/requirements-joblib.txt) for the acceptance oracle's joblib.load.
if [ ! -x "$venv/bin/python" ] || ! "$venv/bin/python" -c "import torch, joblib, lz4" 2>/dev/null; then
    [ -x "$venv/bin/python" ] || python3 -m venv "$venv"
    # --no-cache-dir: the wheels (~3.5 GB, CUDA libraries included) are installed once here;
    # a cached copy beside the installed one doubles the disk CI needs.
    "$venv/bin/pip" install --quiet --disable-pip-version-check --no-cache-dir \
        -r fixtures/requirements.txt -r fixtures/requirements-torch.txt \
        -r fixtures/requirements-joblib.txt >&2
fi
echo "$PWD/$venv"
