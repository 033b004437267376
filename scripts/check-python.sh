#!/usr/bin/env bash
# The Python package's tests (python/tests/) against the wheel scripts/check-wheel.sh built:
# the wheel is installed offline into a fresh virtual environment, and the suite runs twice,
# first without torch (the command and the file API must work; the live probes skip), then
# with the pinned torch (fixtures/requirements-torch.txt) added, every probe on real tensors.
#
# Usage: scripts/check-python.sh [WHEEL_DIR]   (default target/wheels). Needs python3 (3.9+)
# with venv, and PyPI once for pytest (pinned in python/tests/requirements.txt, kept as wheels
# under target/ci-tools), torch (scripts/torch-venv.sh), Keras (fixtures/requirements-keras.txt) and Ray
# (python/tests/requirements-ray.txt).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

out=${1:-target/wheels}
fail() { echo "check-python: $*" >&2; exit 1; }

version=$(sed -n 's/^version = "\(.*\)"$/\1/p' Cargo.toml | head -n1)
shopt -s nullglob
wheels=("$out"/tensorplay_audit-"$version"-*.whl)
[ "${#wheels[@]}" -eq 1 ] || fail "expected one tensorplay $version wheel in $out (run scripts/check-wheel.sh), found ${#wheels[@]}"

# pytest as wheels, fetched once: the fresh environment installs them with pip offline.
pytest_wheels=target/ci-tools/pytest-$(sha256sum python/tests/requirements.txt | cut -c1-12)
if [ ! -f "$pytest_wheels/ok" ]; then
    rm -rf "$pytest_wheels"
    python3 -m pip download --quiet --disable-pip-version-check --only-binary=:all: \
        --dest "$pytest_wheels" -r python/tests/requirements.txt
    touch "$pytest_wheels/ok"
fi
torch_venv=$(bash scripts/torch-venv.sh)

scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
python3 -m venv "$scratch/venv"
py=$scratch/venv/bin/python
"$py" -m pip install --quiet --disable-pip-version-check --no-index \
    --find-links "$pytest_wheels" "${wheels[0]}" -r python/tests/requirements.txt
"$py" -c "import torch" 2>/dev/null && fail "the fresh environment has torch before it was added"

# The shipped stubs (`py.typed`, `*.pyi`) against a typed user of the API: mypy --strict, from
# pinned wheels fetched once, run where the wheel is installed so it reads the stubs the wheel
# ships. An unused `type: ignore` fails too: the stubs must reject the misuse it marks.
typing_wheels=target/ci-tools/typing-$(sha256sum python/tests/requirements-typing.txt | cut -c1-12)
if [ ! -f "$typing_wheels/ok" ]; then
    rm -rf "$typing_wheels"
    python3 -m pip download --quiet --disable-pip-version-check --only-binary=:all: \
        --dest "$typing_wheels" -r python/tests/requirements-typing.txt
    touch "$typing_wheels/ok"
fi
"$py" -m pip install --quiet --disable-pip-version-check --no-index \
    --find-links "$typing_wheels" -r python/tests/requirements-typing.txt
site_packages=$("$py" -c "import sysconfig; print(sysconfig.get_paths()['purelib'])")
for stub in py.typed __init__.pyi testing.pyi _tensorplay.pyi; do
    [ -f "$site_packages/tensorplay/$stub" ] || fail "the wheel does not ship tensorplay/$stub"
done
echo "check-python: mypy --strict on the typed usage of the stubs"
(cd "$scratch" && "$py" -m mypy --strict --warn-unused-ignores --no-incremental \
    "$OLDPWD/python/tests/typing/usage.py") || fail "the stubs do not type the documented usage"

# The model-signature oracle (python/tests/test_signatures.py): model-signing 1.1.1 and every
# package it installs, pinned in fixtures/requirements-signatures.txt (the pins that made
# fixtures/signatures/), as wheels fetched once and installed offline.
signing_wheels=target/ci-tools/signatures-$(sha256sum fixtures/requirements-signatures.txt | cut -c1-12)
if [ ! -f "$signing_wheels/ok" ]; then
    rm -rf "$signing_wheels"
    python3 -m pip download --quiet --disable-pip-version-check --only-binary=:all: \
        --dest "$signing_wheels" -r fixtures/requirements-signatures.txt
    touch "$signing_wheels/ok"
fi
"$py" -m pip install --quiet --disable-pip-version-check --no-index \
    --find-links "$signing_wheels" -r fixtures/requirements-signatures.txt
"$py" -c "import model_signing" || fail "model_signing does not import from its pinned wheels"

# -p no:cacheprovider: nothing written into the checkout.
suite() { (cd python/tests && "$py" -m pytest -p no:cacheprovider -q -rs "$@" .); }

# The fragmentation report must be rendered in Chromium (installed by
# scripts/check-html-browser.sh, which .ci/run runs first), not skipped for want of it.
export TENSORPLAY_REQUIRE_CHROMIUM=1
# The wheel is a release build: the fixtures slow to read in a debug build run too.
export TENSORPLAY_SLOW_FIXTURES=1
echo "check-python: without torch"
suite >"$scratch/no-torch.txt" 2>&1 || { cat "$scratch/no-torch.txt" >&2; fail "the suite failed without torch"; }
tail -n 3 "$scratch/no-torch.txt"
# The live tests must have been skipped for want of torch, not passed by accident.
grep -q "could not import 'torch'" "$scratch/no-torch.txt" || fail "the live tests did not skip without torch"

# torch from the shared pinned environment, seen through a .pth file: the wheel's environment
# stays fresh, and torch is not installed twice.
site=$("$torch_venv/bin/python" -c "import sysconfig; print(sysconfig.get_paths()['purelib'])")
fresh_site=$("$py" -c "import sysconfig; print(sysconfig.get_paths()['purelib'])")
echo "$site" >"$fresh_site/torch-from-ci-tools.pth"
"$py" -c "import torch; assert torch.__version__.startswith('2.9.1'), torch.__version__"
# Keras 3 (fixtures/requirements-keras.txt, every package pinned: numpy is torch's), the oracle
# of python/tests/test_keras.py, as wheels fetched once and installed offline beside torch: the
# Keras tests run here, never skipped.
keras_wheels=target/ci-tools/keras-$(sha256sum fixtures/requirements-keras.txt | cut -c1-12)
if [ ! -f "$keras_wheels/ok" ]; then
    rm -rf "$keras_wheels"
    python3 -m pip download --quiet --disable-pip-version-check --only-binary=:all: --no-deps \
        --dest "$keras_wheels" -r fixtures/requirements-keras.txt
    touch "$keras_wheels/ok"
fi
"$py" -m pip install --quiet --disable-pip-version-check --no-index --no-deps \
    --find-links "$keras_wheels" -r fixtures/requirements-keras.txt
KERAS_BACKEND=torch "$py" -c "import keras; assert keras.__version__ == '3.15.1', keras.__version__"
# Ray (python/tests/requirements-ray.txt, every package pinned), for
# python/tests/test_distributed.py's local cluster: wheels fetched once, installed offline;
# the distributed tests run here, never skipped.
ray_wheels=target/ci-tools/ray-$(sha256sum python/tests/requirements-ray.txt | cut -c1-12)
if [ ! -f "$ray_wheels/ok" ]; then
    rm -rf "$ray_wheels"
    python3 -m pip download --quiet --disable-pip-version-check --only-binary=:all: --no-deps \
        --dest "$ray_wheels" -r python/tests/requirements-ray.txt
    touch "$ray_wheels/ok"
fi
"$py" -m pip install --quiet --disable-pip-version-check --no-index --no-deps \
    --find-links "$ray_wheels" -r python/tests/requirements-ray.txt
"$py" -c "import ray; assert ray.__version__ == '2.60.0', ray.__version__"
echo "check-python: with torch $("$py" -c 'import torch; print(torch.__version__)'), keras and ray"
suite >"$scratch/torch.txt" 2>&1 || { cat "$scratch/torch.txt" >&2; fail "the suite failed with torch"; }
tail -n 3 "$scratch/torch.txt"
# The Keras oracle ran: with torch and Keras installed, nothing of it may skip.
grep -q "SKIPPED.*test_keras.py" "$scratch/torch.txt" && fail "the Keras tests skipped with torch installed"
# The Ray fan-out ran on its local cluster: with Ray installed, nothing of it may skip.
grep -q "SKIPPED.*test_distributed.py" "$scratch/torch.txt" && fail "the Ray tests skipped with Ray installed"
echo "check-python: ok"
