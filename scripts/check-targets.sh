#!/usr/bin/env bash
# Type-checks the crates the wheel ships (the engine, the remote reader, the CLI and the
# Python extension) for macOS and Windows, whose cfg-gated code (no `mincore`, no remote
# reads) Linux never compiles. Installs the targets' standard libraries with rustup.
#
# There is no macOS SDK or MinGW here, so the C sources some dependencies build (ring, zstd)
# are compiled by the host's `cc` as a stand-in (scripts/standin-cc.sh): `cargo check` links
# nothing, so only the Rust side is checked for the target, which is the point.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

targets=(x86_64-apple-darwin x86_64-pc-windows-gnu)
rustup target add "${targets[@]}"
standin="$PWD/scripts/standin-cc.sh"
for target in "${targets[@]}"; do
    var=${target//-/_}
    echo "== cargo check --target $target"
    # Warnings fail it, as clippy's do on Linux.
    env "CC_$var=$standin" "AR_$var=ar" RUSTFLAGS="-D warnings" \
        cargo check --locked --target "$target" \
        -p tensorplay-engine -p tensorplay-remote -p tensorplay -p tensorplay-python
    # ~800 MB each, on a disk the torch environment of later checks needs.
    rm -rf "target/$target"
done
