#!/usr/bin/env bash
# Compares what two tensorplay binaries report on the same files: the whole JSON report of
# `audit --format json --fail-on never` and its exit status, and `views --format json` with
# the `disjoint` pairs dropped from both sides (since the views sweep, `views` lists only the
# pairs that share bytes). A memory-budget refusal's estimate may differ between builds that
# charge what a reading holds differently (the view analysis, a pickle's values): such a
# report is compared with the estimate masked and counted apart, so a change of cost is seen
# and a change of verdict fails.
#
# Usage: scripts/compare-findings.sh BEFORE AFTER [FILE...]
# Without FILEs, every file git tracks under fixtures/. Exits 1 on any other difference;
# the outputs are kept under $COMPARE_OUT (default target/compare-findings).
set -euo pipefail
[ $# -ge 2 ] || { echo "usage: $0 BEFORE AFTER [FILE...]" >&2; exit 2; }
before=$(realpath "$1")
after=$(realpath "$2")
shift 2
cd "$(dirname "${BASH_SOURCE[0]}")/.."
out=${COMPARE_OUT:-target/compare-findings}
rm -rf "$out"
mkdir -p "$out/before" "$out/after"
if [ $# -eq 0 ]; then
    mapfile -t files < <(git ls-files fixtures)
else
    files=("$@")
fi

# Each binary's reports of one file, into $out/$side/$key.{audit,views}: stdout, then the exit
# status on a line of its own (stderr is not compared: it carries no findings).
run() {
    local bin=$1 side=$2 key=$3 file=$4 rc
    rc=0
    timeout 300 "$bin" audit --format json --fail-on never "$file" >"$out/$side/$key.audit" 2>/dev/null || rc=$?
    echo "exit $rc" >>"$out/$side/$key.audit"
    rc=0
    timeout 300 "$bin" views --format json "$file" >"$out/$side/$key.views.raw" 2>/dev/null || rc=$?
    if [ "$rc" -eq 0 ]; then
        jq '.shared_storages[].relations |= map(select(.relation != "disjoint"))' \
            "$out/$side/$key.views.raw" >"$out/$side/$key.views"
    else
        : >"$out/$side/$key.views"
    fi
    echo "exit $rc" >>"$out/$side/$key.views"
}

# The report with every memory-budget estimate (what "the read would hold", and the fix's
# "above the N it needed so far, e.g. --max-memory M") and the fingerprints (which hash the
# message) masked.
masked() {
    sed -E -e 's/(the read would hold )[0-9.]+ [KMGT]?i?B \([0-9]+ bytes\)/\1N/g' \
        -e 's/(above the )[0-9.]+ [KMGT]?i?B( it needed so far, e\.g\. --max-memory )[0-9.]+[KMGT]?i?B/\1N\2M/g' \
        -e 's/(max_memory = \\")[0-9.]+[KMGT]?i?B/\1M/g' \
        -e 's/"fingerprint": "[0-9a-f]+"/"fingerprint": "F"/' "$1"
}

same=0 estimate=0 differ=0
for file in "${files[@]}"; do
    key=$(printf '%s' "$file" | tr '/' '%')
    run "$before" before "$key" "$file"
    run "$after" after "$key" "$file"
    for kind in audit views; do
        a="$out/before/$key.$kind" b="$out/after/$key.$kind"
        if cmp -s "$a" "$b"; then
            same=$((same + 1))
        elif cmp -s <(masked "$a") <(masked "$b"); then
            estimate=$((estimate + 1))
            echo "estimate only: $kind $file"
        else
            differ=$((differ + 1))
            echo "DIFFERS: $kind $file"
            diff <(masked "$a") <(masked "$b") | head -20 || true
        fi
    done
done
echo "${#files[@]} files: $same reports identical, $estimate differ only in a budget estimate, $differ differ"
[ "$differ" -eq 0 ]
