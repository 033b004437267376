#!/usr/bin/env bash
# Seeds each fuzz target's corpus (fuzz/corpus/<target>/) from the committed fixtures.
# The corpus is not committed: run this before the first `cargo fuzz run`. Safe to rerun;
# it only adds files. Needs unzip and tar for the pickles inside archives (never executed:
# they are copied as bytes).
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
corpus="$root/fuzz/corpus"
mkdir -p "$corpus"/{pickle,zip,legacy,safetensors,audit,tar,dcp_metadata,pt2_program,gguf,numpy,joblib}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# hex of `count` bytes of file at `offset`
hex() { od -An -tx1 -j "$2" -N "$3" "$1" 2>/dev/null | tr -d ' \n'; }

# a member name as a file name
flat() { printf '%s' "$1" | tr -c 'A-Za-z0-9._-' '_'; }

add() { # add TARGET FILE NAME
    cp -f "$2" "$corpus/$1/$3"
}

legacy_magic=8a0a6cfc9c46f9206aa85019
while IFS= read -r -d '' f; do
    case "$f" in
        *.py | *.md | *.txt | *.sh | *.truth.json) continue ;;
    esac
    [ -s "$f" ] || continue
    rel=${f#"$root/fixtures/"}
    name=${rel//\//_}
    # Every fixture is an audit seed: the audit picks its reader from the content.
    add audit "$f" "$name"
    first4=$(hex "$f" 0 4)
    if [ "$first4" = 504b0304 ] || [ "$first4" = 504b0506 ]; then
        add zip "$f" "$name"
        # A .pt2's programs seed the program JSON target.
        unzip -Z1 "$f" 2>/dev/null | grep -E '(^|/)models/[^/]+\.json$|^[^/]*/?serialized_exported_program\.json$' | while IFS= read -r member; do
            unzip -p "$f" "$member" >"$tmp/m" 2>/dev/null || continue
            [ -s "$tmp/m" ] && cp "$tmp/m" "$corpus/pt2_program/${name}_$(flat "$member")"
        done || true
        # Its pickles (data.pkl, constants.pkl, ...) seed the pickle machine.
        unzip -Z1 "$f" 2>/dev/null | grep -E '\.pkl$' | while IFS= read -r member; do
            unzip -p "$f" "$member" >"$tmp/m" 2>/dev/null || continue
            [ -s "$tmp/m" ] && cp "$tmp/m" "$corpus/pickle/${name}_$(flat "$member")"
        done || true
    elif [ "$(hex "$f" 257 5)" = 7573746172 ]; then # "ustar": an old tar checkpoint
        add legacy "$f" "$name"
        add tar "$f" "$name"
        tar -tf "$f" 2>/dev/null | while IFS= read -r member; do
            case "$member" in */ | tensors | storages) continue ;; esac
            tar -xOf "$f" "$member" >"$tmp/m" 2>/dev/null || continue
            [ -s "$tmp/m" ] && cp "$tmp/m" "$corpus/pickle/${name}_$(flat "$member")"
        done || true
    elif [ "$(hex "$f" 0 1)" = 80 ] && [ "$(hex "$f" 2 12)" = "$legacy_magic" ]; then
        add legacy "$f" "$name"
        add pickle "$f" "$name"
    elif [ "$first4" = 47475546 ]; then # "GGUF"
        add gguf "$f" "$name"
    elif [ "$(hex "$f" 0 6)" = 934e554d5059 ]; then # "\x93NUMPY"
        add numpy "$f" "$name"
    elif [[ "$f" == */joblib/* ]]; then # joblib files, compressed or not
        add joblib "$f" "$name"
    elif [ "$(hex "$f" 8 1)" = 7b ] || [[ "$f" == *.safetensors ]]; then # a length, then "{"
        add safetensors "$f" "$name"
    elif [ "$(hex "$f" 0 1)" = 80 ] || [[ "$f" == *.pkl ]] || [[ "$f" == *.metadata ]]; then
        add pickle "$f" "$name"
        [[ "$f" == *.metadata ]] && add dcp_metadata "$f" "$name"
    fi
done < <(find "$root/fixtures" -type f -print0 | sort -z)

for t in pickle zip legacy safetensors audit tar dcp_metadata pt2_program gguf numpy joblib; do
    printf '%-12s %4d seeds\n' "$t" "$(find "$corpus/$t" -type f | wc -l)"
done
