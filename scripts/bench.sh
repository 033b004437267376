#!/usr/bin/env bash
# Benchmark tensorplay against `cat` and the Python way on generated checkpoints (1 GiB bf16,
# transformer-shaped, in safetensors and PyTorch zip; 20 000 small tensors in both), then
# write BENCHMARKS.md. Usage: scripts/bench.sh [WORKDIR]   (default: /tmp/tensorplay-bench)
# Needs ~3 GiB free in WORKDIR. Installs the pinned torch/safetensors into .venv-fixtures.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

VENV=.venv-fixtures
[ -x "$VENV/bin/python" ] || python3 -m venv "$VENV"
"$VENV/bin/python" -m pip install --quiet --disable-pip-version-check \
    -r fixtures/requirements.txt -r fixtures/requirements-torch.txt
cargo build --release --locked
"$VENV/bin/python" scripts/bench.py --tensorplay target/release/tensorplay \
    --workdir "${1:-/tmp/tensorplay-bench}" --out BENCHMARKS.md
