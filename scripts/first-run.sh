#!/usr/bin/env bash
# Times the README's first command from a cold target directory: `cargo run --release --
# audit fixtures/` (build and audit), as a new user runs it. Prints wall and CPU seconds and
# the disk the target directory then takes; the result goes in BENCHMARKS.md and the README.
#   scripts/first-run.sh [TARGET_DIR]   (default: a fresh temporary folder, removed after)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

target=${1:-}
if [ -z "$target" ]; then
    target=$(mktemp -d)
    trap 'rm -rf "$target"' EXIT
fi
status=0
CARGO_TARGET_DIR=$target /usr/bin/time -f "%e %U %S" -o "$target/time.txt" \
    cargo run --release --locked --quiet -- audit fixtures/ >/dev/null 2>&1 || status=$?
# 1 = findings, which the fixtures are made to have.
[ "$status" -le 1 ] || { echo "first-run: the audit exited $status" >&2; exit 2; }
# GNU time puts "Command exited with non-zero status 1" first when the audit finds something.
read -r wall user sys < <(tail -n 1 "$target/time.txt")
disk=$(du -sh "$target" | cut -f1)
echo "first-run: cargo run --release -- audit fixtures/ from a cold target: ${wall} s wall, $(awk -v u="$user" -v s="$sys" 'BEGIN { print u + s }') CPU-seconds on $(nproc) cores; target/ then takes ${disk}"
