#!/usr/bin/env bash
# Builds the tensorplay wheel with maturin (pinned, from PyPI), installs it into a fresh virtual
# environment and checks the installed command: `tensorplay --version` names the workspace
# version, and auditing a fixture with a known violation exits 1 with that finding in the JSON.
# The dist profile (stripped, fat LTO, one codegen unit) makes this a slow build: see
# BENCHMARKS.md.
#
# Usage: scripts/check-wheel.sh [WHEEL_DIR]   (the wheel is left in WHEEL_DIR, default
# target/wheels). Needs python3 (3.8+) with venv, cargo, and PyPI for maturin.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

MATURIN_VERSION=1.16.0
# Tools live under target/ (git-ignored), reused between runs.
tools=target/ci-tools/maturin-$MATURIN_VERSION
out=${1:-target/wheels}

fail() { echo "check-wheel: $*" >&2; exit 1; }

if [ ! -x "$tools/bin/maturin" ]; then
    rm -rf "$tools"
    python3 -m venv "$tools"
    "$tools/bin/pip" install --quiet --disable-pip-version-check "maturin==$MATURIN_VERSION"
fi

version=$(sed -n 's/^version = "\(.*\)"$/\1/p' Cargo.toml | head -n1)
[ -n "$version" ] || fail "no workspace version in Cargo.toml"

rm -f "$out"/tensorplay-*.whl
start=$SECONDS
"$tools/bin/maturin" build --profile dist --locked --out "$out"
echo "check-wheel: wheel built in $((SECONDS - start)) s"
shopt -s nullglob
wheels=("$out"/tensorplay_audit-"$version"-*.whl)
[ "${#wheels[@]}" -eq 1 ] || fail "expected one tensorplay $version wheel in $out, found ${#wheels[@]}"
wheel=${wheels[0]}
echo "check-wheel: $wheel ($(du -k "$wheel" | cut -f1) KiB)"

scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
python3 -m venv "$scratch/venv"
# Only the wheel: nothing is fetched, so a wheel that needed more would fail here.
"$scratch/venv/bin/pip" install --quiet --disable-pip-version-check --no-index "$wheel"
bin=$scratch/venv/bin/tensorplay
[ -x "$bin" ] || fail "the wheel installed no tensorplay command"

got=$("$bin" --version)
[ "$got" = "tensorplay $version" ] || fail "tensorplay --version printed '$got', expected 'tensorplay $version'"

# Two views of one storage that overlap: TP101 (an error), so the audit exits 1.
set +e
"$bin" audit --color never --json "$scratch/report.json" fixtures/pytorch/overlapping_params.pt \
    >"$scratch/log.txt" 2>&1
rc=$?
set -e
[ "$rc" -eq 1 ] || { cat "$scratch/log.txt" >&2; fail "audit exited $rc, expected 1"; }
"$scratch/venv/bin/python" - "$scratch/report.json" <<'PY' || fail "the JSON report lacks the TP101 finding"
import json, sys
report = json.load(open(sys.argv[1]))
codes = [f["code"] for file in report["files"] for f in file["findings"]]
sys.exit(0 if "TP101" in codes and report["summary"]["passed"] is False else 1)
PY
echo "check-wheel: ok: $got from $(basename "$wheel"); fixture audit exited 1 with TP101"
