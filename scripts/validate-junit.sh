#!/usr/bin/env bash
# Validates tensorplay's JUnit report with xmllint (Debian: libxml2-utils) against the two
# schemas in tests/data: the Jenkins xUnit plugin's junit-10.xsd and the Ant JUnit.xsd.
# The attributes both readers ignore but the schemas do not declare (our documented
# extensions: `file` on test cases, totals on <testsuites>, a case's <system-out> for Ant) are
# removed first.
#
#   scripts/validate-junit.sh [REPORT.xml]   # default: audit fixtures/ into a temporary report
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

command -v xmllint >/dev/null || { echo "error: xmllint is not installed (libxml2-utils)" >&2; exit 2; }

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

report=${1:-}
if [ -z "$report" ]; then
    report=$work/junit.xml
    status=0
    cargo run --quiet --locked -p tensorplay -- audit --junit "$report" fixtures >/dev/null || status=$?
    # 1 = findings, which the fixtures are made to have; anything else is a failure.
    [ "$status" -le 1 ] || { echo "error: tensorplay audit exited $status" >&2; exit 2; }
fi

# Attribute values are escaped (no raw quotes), so these patterns cannot cut one short.
sed -e 's/ file="[^"]*"//' -e '/^<testsuites /s/ skipped="[^"]*"//' "$report" >"$work/jenkins.xml"
# A case's own <system-out> (below --fail-on findings, for Jenkins) is not in the Ant XSD; its
# text is escaped, so no '<' ends it early.
sed -e 's/ file="[^"]*"//' -e 's/^<testsuites [^>]*>/<testsuites>/' "$report" |
    perl -0pe 's{\n      <system-out>[^<]*</system-out>}{}g' >"$work/ant.xml"

# --huge: the hostile fixtures' findings quote names of 32 000 bytes, 221 times in one file's
# failure text, past libxml2's default 10 MB cap on one text node (a parser limit, not XML).
xmllint --huge --noout --schema tests/data/junit-10.xsd "$work/jenkins.xml"
xmllint --huge --noout --schema tests/data/JUnit.xsd "$work/ant.xml"
