#!/usr/bin/env bash
# Audits the fixture folders from moto's S3 server (pinned, from PyPI, on a loopback port) and
# checks each gives the findings of the same folder audited locally. The Rust tests check the
# same against the loopback emulation in tests/common/range_server.rs; this checks it against
# an S3 implementation tensorplay's authors did not write. Needs python3 with venv and PyPI.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

MOTO_VERSION=5.2.5
BOTO3_VERSION=1.44.5
tools=target/ci-tools/moto-$MOTO_VERSION
if [ ! -x "$tools/bin/moto_server" ]; then
    rm -rf "$tools"
    python3 -m venv "$tools"
    "$tools/bin/pip" install --quiet --disable-pip-version-check \
        "moto[server]==$MOTO_VERSION" "boto3==$BOTO3_VERSION"
fi
cargo build --quiet --locked -p tensorplay
"$tools/bin/python" scripts/remote-s3.py target/debug/tensorplay "$tools/bin/moto_server"
