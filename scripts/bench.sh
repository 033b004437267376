#!/usr/bin/env bash
# Benchmark tensorplay against `cat`, a two-thread sum over the mapped file and the Python way
# on generated checkpoints (1 GiB bf16, transformer-shaped, in safetensors and PyTorch zip;
# 20 000 small tensors in both), then
# write BENCHMARKS.md. Usage: scripts/bench.sh [--scale] [WORKDIR]   (default: /tmp/tensorplay-bench)
# Needs ~3 GiB free in WORKDIR. Installs the pinned torch/safetensors into .venv-fixtures.
# --scale: only the per-tensor table (1 000 → 1 000 000 tensors against the safetensors
# package, torch.load and picklescan, pinned in scripts/requirements-bench.txt and installed
# into target/bench-venv, and 20 000 / 200 000 views of one buffer at the default budget); it
# replaces that section of BENCHMARKS.md and keeps the rest.
# Figures are CPU-seconds (user + sys) and peak RSS; each is recorded in BENCHMARKS.md and
# compared with the one the last run recorded ("## Compared with the last recording"). Exit 1
# when one got worse by more than 20 % (BENCHMARKS.md is written first), so a run before a stop
# fails loudly.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

SCALE=()
if [ "${1:-}" = "--scale" ]; then
    SCALE=(--scale --picklescan target/bench-venv/bin/picklescan)
    shift
fi
VENV=.venv-fixtures
[ -x "$VENV/bin/python" ] || python3 -m venv "$VENV"
"$VENV/bin/python" -m pip install --quiet --disable-pip-version-check \
    -r fixtures/requirements.txt -r fixtures/requirements-torch.txt
if [ ${#SCALE[@]} -gt 0 ]; then
    [ -x target/bench-venv/bin/python ] || python3 -m venv target/bench-venv
    target/bench-venv/bin/python -m pip install --quiet --disable-pip-version-check \
        -r scripts/requirements-bench.txt
fi
cargo build --profile dist --locked
cargo build --profile dist --locked -p tensorplay-engine --example mapped_sum
# The last command: its exit status (1 when a figure got worse) is the script's.
exec "$VENV/bin/python" scripts/bench.py --tensorplay target/dist/tensorplay \
    --mapped-sum target/dist/examples/mapped_sum \
    --workdir "${1:-/tmp/tensorplay-bench}" --out BENCHMARKS.md "${SCALE[@]}"
