#!/usr/bin/env bash
# Audits the fixture folders from moto's S3 server and from Azurite's Blob service (both
# pinned, on loopback ports) and checks each gives the findings of the same folder audited
# locally. The Rust tests check the same against the loopback emulation in
# tests/common/range_server.rs; this checks it against store implementations tensorplay's
# authors did not write. Needs python3 with venv, node with npm, PyPI and npm's registry.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

MOTO_VERSION=5.2.5
BOTO3_VERSION=1.44.5
AZURE_BLOB_VERSION=12.31.1
AZURITE_VERSION=3.37.0
tools=target/ci-tools/remote-stores-$MOTO_VERSION-$AZURE_BLOB_VERSION
if [ ! -x "$tools/bin/moto_server" ]; then
    rm -rf "$tools"
    python3 -m venv "$tools"
    "$tools/bin/pip" install --quiet --disable-pip-version-check \
        "moto[server]==$MOTO_VERSION" "boto3==$BOTO3_VERSION" \
        "azure-storage-blob==$AZURE_BLOB_VERSION"
fi
azurite=target/ci-tools/azurite-$AZURITE_VERSION
if [ ! -x "$azurite/node_modules/.bin/azurite-blob" ]; then
    rm -rf "$azurite"
    mkdir -p "$azurite"
    npm install --prefix "$azurite" --silent --no-audit --no-fund "azurite@$AZURITE_VERSION" >/dev/null
fi
cargo build --quiet --locked -p tensorplay
"$tools/bin/python" scripts/remote-stores.py target/debug/tensorplay \
    "$tools/bin/moto_server" "$azurite/node_modules/.bin/azurite-blob"
