#!/usr/bin/env bash
# The differential harness as CI runs it: every fixture as it is, then a bounded, repeatable
# set of structure-aware variants (fixed seed and count), each checked against what the real
# loaders (CPython's C unpickler, torch.load's weights-only unpickler, torch.jit.load,
# torch.export.load, dcp.load) would do. Exits 1 on any divergence (see fuzz/README.md).
#
# Needs python3 with venv and PyPI for the pinned torch (fixtures/requirements*.txt), installed
# once under target/ci-tools by scripts/torch-venv.sh (a large download).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

venv=$(bash scripts/torch-venv.sh)
cargo build --quiet --locked -p tensorplay
"$venv/bin/python" fuzz/differential/harness.py \
    --mutate --variants "${DIFFERENTIAL_VARIANTS:-300}" --seed 1 --out target/differential fixtures/
