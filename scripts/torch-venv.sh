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
    pip=("$venv/bin/pip" install --quiet --disable-pip-version-check --no-cache-dir)
    # Resolved first (metadata only, nothing downloaded), then installed one package at a time:
    # pip holds every downloaded wheel (~3.5 GB, CUDA libraries included) until the last is
    # installed, so one call would need the wheels and the installed tree (~7 GB) at once.
    # --no-cache-dir: no cached copy stays beside the installed one either.
    echo "torch-venv: installing into $venv ($(df -h --output=avail . | tail -n 1 | tr -d ' ') free)" >&2
    report=$(mktemp)
    trap 'rm -f "$report"' EXIT
    "${pip[@]}" --dry-run --ignore-installed --report "$report" \
        -r fixtures/requirements.txt -r fixtures/requirements-torch.txt \
        -r fixtures/requirements-joblib.txt >&2
    "$venv/bin/python" -c '
import json, sys
for item in json.load(open(sys.argv[1]))["install"]:
    print(item["metadata"]["name"] + "==" + item["metadata"]["version"])
' "$report" | while read -r pin; do
        "${pip[@]}" --no-deps "$pin" >&2
    done
    "$venv/bin/pip" check --disable-pip-version-check >&2
fi
echo "$PWD/$venv"
