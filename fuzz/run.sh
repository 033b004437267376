#!/usr/bin/env bash
# Runs one fuzz target over its corpus, as the recorded runs in fuzz/README.md did:
#   fuzz/run.sh TARGET [SECONDS]   (default 900)
# Build first: (cd fuzz && cargo +nightly fuzz build -s none -a). Fork mode goes on after a
# crash, hang or out-of-memory, leaving each input in fuzz/artifacts/TARGET/.
set -euo pipefail

target=${1:?usage: fuzz/run.sh TARGET [SECONDS]}
seconds=${2:-900}
fuzz=$(cd "$(dirname "$0")" && pwd)
bin="$fuzz/target/x86_64-unknown-linux-gnu/release/$target"
[ -x "$bin" ] || { echo "no $bin: build it first" >&2; exit 2; }
mkdir -p "$fuzz/corpus/$target" "$fuzz/artifacts/$target"
cd "$fuzz"
dict=()
[ -f "dict/$target.dict" ] && dict=(-dict="dict/$target.dict")
exec nice -n 19 "$bin" "corpus/$target" \
    "${dict[@]}" \
    -artifact_prefix="artifacts/$target/" \
    -rss_limit_mb=1024 -timeout=2 \
    -max_total_time="$seconds" \
    -fork=1 -ignore_crashes=1 -ignore_timeouts=1 -ignore_ooms=1 \
    -print_final_stats=1
