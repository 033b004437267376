#!/usr/bin/env bash
# Builds the tensorplay wheel with maturin (pinned, from PyPI): the `tensorplay` package and its
# extension, which also runs the command. Installs it into a fresh virtual environment and
# checks the installed command: `tensorplay --version` names the workspace
# version, and auditing a fixture with a known violation exits 1 with that finding in the JSON.
# Then runs the pre-commit mirror (pre-commit-mirror/) through pre-commit, installed from this
# wheel with pip held offline. The dist profile (stripped, fat LTO, one codegen unit) makes
# this a slow build: see BENCHMARKS.md.
#
# Usage: scripts/check-wheel.sh [WHEEL_DIR]   (the wheel is left in WHEEL_DIR, default
# target/wheels; scripts/check-python.sh tests the package in it). Needs python3 (3.9+) with venv, cargo, git, and PyPI for maturin, pre-commit
# and setuptools (pinned, kept under target/ci-tools).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

MATURIN_VERSION=1.16.0
# pre-commit at the version scripts/lint-templates.sh lints the manifests with: one pin.
PRE_COMMIT_VERSION=$(sed -n 's/^PRE_COMMIT_VERSION=//p' scripts/lint-templates.sh)
# The mirror's build backend; a release that runs on every Python the wheel supports (3.9+).
SETUPTOOLS_VERSION=75.3.2
# Tools live under target/ (git-ignored), reused between runs.
tools=target/ci-tools/maturin-$MATURIN_VERSION
out=${1:-target/wheels}

fail() { echo "check-wheel: $*" >&2; exit 1; }

if [ ! -x "$tools/bin/maturin" ]; then
    rm -rf "$tools"
    python3 -m venv "$tools"
    "$tools/bin/pip" install --quiet --disable-pip-version-check "maturin==$MATURIN_VERSION"
fi

version=$(sed -n 's/^version = "\(.*\)"$/\1/p' Cargo.toml | head -n1)
[ -n "$version" ] || fail "no workspace version in Cargo.toml"

rm -f "$out"/tensorplay_audit-*.whl
start=$SECONDS
"$tools/bin/maturin" build --profile dist --locked --out "$out"
echo "check-wheel: wheel built in $((SECONDS - start)) s"
shopt -s nullglob
wheels=("$out"/tensorplay_audit-"$version"-*.whl)
[ "${#wheels[@]}" -eq 1 ] || fail "expected one tensorplay $version wheel in $out, found ${#wheels[@]}"
wheel=${wheels[0]}
echo "check-wheel: $wheel ($(du -k "$wheel" | cut -f1) KiB)"

scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
python3 -m venv "$scratch/venv"
# Only the wheel: nothing is fetched, so a wheel that needed more would fail here.
"$scratch/venv/bin/pip" install --quiet --disable-pip-version-check --no-index "$wheel"
bin=$scratch/venv/bin/tensorplay
[ -x "$bin" ] || fail "the wheel installed no tensorplay command"

got=$("$bin" --version)
[ "$got" = "tensorplay $version" ] || fail "tensorplay --version printed '$got', expected 'tensorplay $version'"

# Two views of one storage that overlap: TP101 (an error), so the audit exits 1.
set +e
"$bin" audit --color never --json "$scratch/report.json" fixtures/pytorch/overlapping_params.pt \
    >"$scratch/log.txt" 2>&1
rc=$?
set -e
[ "$rc" -eq 1 ] || { cat "$scratch/log.txt" >&2; fail "audit exited $rc, expected 1"; }
"$scratch/venv/bin/python" - "$scratch/report.json" <<'PY' || fail "the JSON report lacks the TP101 finding"
import json, sys
report = json.load(open(sys.argv[1]))
codes = [f["code"] for file in report["files"] for f in file["findings"]]
sys.exit(0 if "TP101" in codes and report["summary"]["passed"] is False else 1)
PY
echo "check-wheel: $got from $(basename "$wheel"); fixture audit exited 1 with TP101"

# The pre-commit mirror, end to end, as a user's repository meets it: pre-commit clones the
# mirror, pip-installs it (its one dependency, tensorplay-audit==VERSION, from this wheel) into
# the hook's environment and runs the hook on the files given. pip is held offline with only
# this wheel and setuptools to install: a mirror that pinned another version, needed anything
# else or compiled tensorplay fails here. setuptools is the one thing fetched from the index,
# once, into target/ci-tools: pip builds the mirror in an isolated environment, which needs
# its build backend, and none comes with pip.
precommit=$PWD/target/ci-tools/pre-commit-$PRE_COMMIT_VERSION
[ -n "$PRE_COMMIT_VERSION" ] || fail "no PRE_COMMIT_VERSION in scripts/lint-templates.sh"
if [ ! -x "$precommit/bin/pre-commit" ]; then
    rm -rf "$precommit"
    python3 -m venv "$precommit"
    "$precommit/bin/pip" install --quiet --disable-pip-version-check "pre-commit==$PRE_COMMIT_VERSION"
fi
setuptools=target/ci-tools/setuptools-$SETUPTOOLS_VERSION
if [ ! -f "$setuptools/ok" ]; then
    rm -rf "$setuptools"
    python3 -m pip download --quiet --disable-pip-version-check --no-deps --only-binary=:all: \
        --dest "$setuptools" "setuptools==$SETUPTOOLS_VERSION"
    touch "$setuptools/ok"
fi
# The only packages pip may install: one folder, so no path needs splitting.
offline=$scratch/wheels
mkdir -p "$offline"
cp "$wheel" "$setuptools"/setuptools-*.whl "$offline/"

git_commit() {
    git -C "$1" init --quiet
    git -C "$1" add -A
    git -C "$1" -c user.name=check-wheel -c user.email=check-wheel@localhost \
        -c commit.gpgsign=false commit --quiet -m "$2"
}
mirror=$scratch/mirror
cp -R pre-commit-mirror "$mirror"
git_commit "$mirror" "tensorplay pre-commit mirror"
# A user's repository: a checkpoint with two overlapping views (TP101), a clean one, and a
# tokenizer's `.bin` that tensorplay.toml declares is not a checkpoint.
project=$scratch/project
mkdir -p "$project/tokenizer"
cp fixtures/pytorch/overlapping_params.pt "$project/overlapping.pt"
cp fixtures/pytorch/state_dict.pt "$project/clean.pt"
printf 'not a checkpoint, though named like one\n' > "$project/tokenizer/vocab.bin"
printf '[[ignore]]\npath = "tokenizer/*.bin"\nreason = "not a checkpoint"\n' > "$project/tensorplay.toml"
git_commit "$project" "a project with checkpoints"

# Runs the mirror's hook in the project; its output (pre-commit's and the hook's) goes to
# $scratch/hook.txt, and its exit status is returned.
hook() {
    (
        cd "$project" &&
            PRE_COMMIT_HOME=$scratch/pre-commit-home PIP_NO_INDEX=1 PIP_FIND_LINKS=$offline \
                VIRTUALENV_NO_PERIODIC_UPDATE=1 \
                "$precommit/bin/pre-commit" try-repo "$mirror" tensorplay --verbose --color never "$@"
    ) >"$scratch/hook.txt" 2>&1
}
expect_hook() {
    local want=$1 text=$2 rc=0
    shift 2
    hook "$@" || rc=$?
    [ "$rc" -eq "$want" ] && grep -qF -- "$text" "$scratch/hook.txt" || {
        cat "$scratch/hook.txt" >&2
        fail "pre-commit hook on $*: exit $rc (expected $want) or no '$text' in its output"
    }
}
start=$SECONDS
expect_hook 0 "skipped tokenizer/vocab.bin: not a checkpoint (tensorplay.toml:2)" \
    --files clean.pt tokenizer/vocab.bin
echo "check-wheel: the mirror installed offline from the wheel in $((SECONDS - start)) s; clean files pass"
expect_hook 1 "TP101" --files overlapping.pt
expect_hook 1 "TP101" --all-files
grep -qF "skipped tokenizer/vocab.bin" "$scratch/hook.txt" || fail "--all-files did not skip tokenizer/vocab.bin"
echo "check-wheel: ok: $got from $(basename "$wheel"); fixture audit exited 1 with TP101; the pre-commit mirror fails on TP101 and passes clean files"
