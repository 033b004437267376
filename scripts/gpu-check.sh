#!/usr/bin/env bash
# On a machine with an NVIDIA GPU: build, run the GPU tests, then load every fixture onto
# cuda:0 through pinned staging and the caching allocator, check every DataPtr, and print
# real against simulated reserved bytes. Needs only the Rust toolchain and the NVIDIA driver.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

command -v nvidia-smi >/dev/null && nvidia-smi -L || echo "note: nvidia-smi not found; relying on libcuda"
cargo build --release --locked
TENSORPLAY_GPU_TESTS=1 cargo test --release --locked -p tensorplay-engine alloc -- --include-ignored

# Every readable fixture; corrupt ones are reported by the audit itself.
target/release/tensorplay audit --fail-on never --load-to cuda:0 fixtures/ \
    | grep -E '^(fixtures|  GPU load|[0-9]+ files)'
