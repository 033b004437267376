#!/usr/bin/env bash
# The host's C compiler standing in for a target's (scripts/check-targets.sh): the flags only
# Apple's clang takes are dropped, the rest passed on. Its objects are never linked.
args=()
skip=false
for arg in "$@"; do
    if $skip; then
        skip=false
        continue
    fi
    case "$arg" in
        -arch) skip=true ;;
        -mmacosx-version-min=* | -gfull | --target=*) ;;
        *) args+=("$arg") ;;
    esac
done
exec cc "${args[@]}"
