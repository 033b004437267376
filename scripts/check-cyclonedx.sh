#!/usr/bin/env bash
# Validates tensorplay's CycloneDX BOMs (`--cyclonedx`) against the official CycloneDX 1.6 JSON
# schema with cyclonedx-python-lib (pinned, installed on first use under target/ci-tools,
# git-ignored; needs python3 with venv and PyPI reachable on the first run). One BOM per kind
# of model: a folder of safetensors with its config.json, a torch.save zip, a GGUF carrying
# chat templates, a block-quantised GGUF, a pickle that fails the audit, and a metadata-only
# run (hashes not computed).
# tests/cyclonedx.rs checks the same BOMs' contents without Python.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

CYCLONEDX_PYTHON_LIB_VERSION=11.12.0

command -v python3 >/dev/null || { echo "error: python3 is not installed" >&2; exit 2; }

venv=target/ci-tools/cyclonedx-$CYCLONEDX_PYTHON_LIB_VERSION
if [ ! -x "$venv/bin/python" ] || ! "$venv/bin/python" -c 'import cyclonedx.validation.json' 2>/dev/null; then
    rm -rf "$venv"
    python3 -m venv "$venv"
    "$venv/bin/pip" install --quiet --disable-pip-version-check \
        "cyclonedx-python-lib[json-validation]==$CYCLONEDX_PYTHON_LIB_VERSION"
fi

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

cargo build --quiet --locked -p tensorplay
bin=target/debug/tensorplay
boms=()
bom() {
    local name=$1
    shift
    local status=0
    "$bin" audit --cyclonedx "$work/$name.cdx.json" "$@" >/dev/null || status=$?
    # 1 = findings, which some fixtures are made to have; anything else is a failure.
    [ "$status" -le 1 ] || { echo "error: tensorplay audit $* exited $status" >&2; exit 2; }
    boms+=("$work/$name.cdx.json")
}
bom safetensors-folder fixtures/models/llama
bom torch-zip fixtures/pytorch/state_dict.pt
bom gguf-chat-template fixtures/chat_templates/named/model.gguf
bom gguf-quantised fixtures/gguf/quantized.gguf
bom failing-pickle fixtures/pytorch/payload_os_system.pt
bom metadata-only --metadata-only fixtures/models/gpt2

"$venv/bin/python" - "${boms[@]}" <<'PY'
import sys
from cyclonedx.schema import SchemaVersion
from cyclonedx.validation.json import JsonStrictValidator

validator = JsonStrictValidator(SchemaVersion.V1_6)
failed = 0
for path in sys.argv[1:]:
    with open(path, encoding="utf-8") as f:
        error = validator.validate_str(f.read())
    if error is not None:
        failed += 1
        print(f"{path}: not valid CycloneDX 1.6: {error}", file=sys.stderr)
if failed:
    sys.exit(1)
print(f"check-cyclonedx: ok ({len(sys.argv) - 1} BOMs valid against CycloneDX 1.6)")
PY
