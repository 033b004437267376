#!/usr/bin/env bash
# The HTML report as a browser renders it: headless Chromium parses the page and every
# section and chart is in its DOM, and the whole fixtures tree's report renders in seconds (tests/html_report.rs, ignored by `cargo test`, which needs
# only Rust). Installs Debian's chromium when it is missing (CI runs as root).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

if ! command -v chromium >/dev/null; then
    apt-get update -qq && apt-get install -y -qq chromium >/dev/null
    apt-get clean
fi
cargo test --locked --test integration -- --ignored html_report::
