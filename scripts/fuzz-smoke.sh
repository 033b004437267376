#!/usr/bin/env bash
# A short fuzz smoke run: builds the fuzz targets and runs each over the fixture seeds for a
# few seconds (default 10), failing on the first crash, hang (> 2 s) or RSS over 1 GiB.
# Needs the nightly toolchain and cargo-fuzz; not part of .ci/run.
#   scripts/fuzz-smoke.sh [SECONDS]
set -euo pipefail

seconds=${1:-10}
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root/fuzz"
cargo +nightly fuzz build -s none -a
./seed.sh >/dev/null
for target in pickle zip legacy safetensors audit tar dcp_metadata pt2_program gguf numpy joblib; do
    echo "== $target (${seconds}s)"
    mkdir -p "artifacts/$target"
    dict=()
    [ -f "dict/$target.dict" ] && dict=(-dict="dict/$target.dict")
    nice -n 19 "target/x86_64-unknown-linux-gnu/release/$target" "corpus/$target" \
        "${dict[@]}" -artifact_prefix="artifacts/$target/" \
        -rss_limit_mb=1024 -timeout=2 -max_total_time="$seconds" 2>&1 | tail -n 3
done
