#!/usr/bin/env bash
# Checks deploy/: the Kubernetes, AWS Batch and Slurm examples and the image definition.
#   check-jsonschema (deploy/schemas/)   the Indexed Job, the merge Job, the Batch job
#                                        definition and submit requests
#   yamllint                             the Kubernetes manifests
#   bash -n, shellcheck when present     the Slurm batch scripts
#   python                               Kubernetes' count = TENSORPLAY_PARTITION_TOTAL = the
#                                        merge's parts; Slurm's --array a regular range; every
#                                        image pin the workspace's version
#   docker or podman, when one runs      builds deploy/Dockerfile and runs the image on a fixture
# Tools are pinned and installed on first use under target/ci-tools (git-ignored); needs python3
# with venv, and PyPI reachable on the first run.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

CHECK_JSONSCHEMA_VERSION=0.39.0
YAMLLINT_VERSION=1.38.0
venv=target/ci-tools/deploy-py-$CHECK_JSONSCHEMA_VERSION
if [ ! -x "$venv/bin/check-jsonschema" ] || [ ! -x "$venv/bin/yamllint" ]; then
    rm -rf "$venv"
    python3 -m venv "$venv"
    "$venv/bin/pip" install --quiet --disable-pip-version-check \
        "check-jsonschema==$CHECK_JSONSCHEMA_VERSION" "yamllint==$YAMLLINT_VERSION"
fi

failed=0
run() {
    echo "check-deploy: $1" >&2
    shift
    "$@" || failed=1
}
schema() { "$venv/bin/check-jsonschema" --schemafile "deploy/schemas/$1" "${@:2}"; }
run "Indexed Job schema" schema indexed-job.schema.json deploy/kubernetes/audit-job.yaml
run "merge Job schema" schema merge-job.schema.json deploy/kubernetes/merge-job.yaml
run "AWS Batch job definition schema" schema batch-job-definition.schema.json deploy/aws-batch/job-definition.json
run "AWS Batch submit schema" schema batch-submit.schema.json deploy/aws-batch/submit-array.json deploy/aws-batch/submit-merge.json
run "yamllint" "$venv/bin/yamllint" --strict -d '{extends: default, rules: {document-start: disable, line-length: {max: 120}}}' deploy/kubernetes/*.yaml
run "Slurm scripts parse" bash -n deploy/slurm/audit-array.sbatch
run "Slurm merge script parses" bash -n deploy/slurm/merge.sbatch
if command -v shellcheck >/dev/null; then
    run "shellcheck" shellcheck deploy/slurm/*.sbatch
else
    echo "check-deploy: shellcheck not installed, skipped" >&2
fi

version=$(sed -n 's/^version = "\(.*\)"$/\1/p' Cargo.toml | head -n1)
run "counts, ranges and pins agree" "$venv/bin/python" - "$version" <<'PY'
import json, pathlib, re, sys
from ruamel.yaml import YAML

version = sys.argv[1]
problems = []
yaml = YAML(typ="safe")
audit = yaml.load(pathlib.Path("deploy/kubernetes/audit-job.yaml"))
merge = yaml.load(pathlib.Path("deploy/kubernetes/merge-job.yaml"))
n = audit["spec"]["completions"]
container = audit["spec"]["template"]["spec"]["containers"][0]
total = [e["value"] for e in container["env"] if e["name"] == "TENSORPLAY_PARTITION_TOTAL"]
if total != [str(n)]:
    problems.append(f"audit-job.yaml: TENSORPLAY_PARTITION_TOTAL {total} is not completions ({n})")
if audit["spec"].get("parallelism", n) > n:
    problems.append("audit-job.yaml: parallelism above completions")
parts = [a for a in merge["spec"]["template"]["spec"]["containers"][0]["args"] if a.startswith("/parts/part-")]
if parts != [f"/parts/part-{i}.json" for i in range(n)]:
    problems.append(f"merge-job.yaml: merges {parts}, not the {n} parts of audit-job.yaml")
if "/parts/part-$(JOB_COMPLETION_INDEX).json" not in container["args"]:
    problems.append("audit-job.yaml: the part is not named by JOB_COMPLETION_INDEX")
array = re.search(r"^#SBATCH --array=(\S+)$", pathlib.Path("deploy/slurm/audit-array.sbatch").read_text(), re.M)
if not array or not re.fullmatch(r"\d+-\d+(:\d+)?(%\d+)?", array.group(1)):
    problems.append("audit-array.sbatch: --array must be a regular range MIN-MAX[:STEP], which --partition auto accepts")
for path in sorted(pathlib.Path("deploy").rglob("*")):
    if path.is_file() and path.suffix != ".md" and "schemas" not in path.parts:
        for pin in re.findall(r"ghcr\.io/tensorplay/tensorplay:([0-9][^\s\"']*)", path.read_text()):
            if pin != version:
                problems.append(f"{path}: image tag {pin}, not the workspace's {version}")
for p in problems:
    print(p, file=sys.stderr)
sys.exit(1 if problems else 0)
PY

# The image, where a container engine runs (CI machines without one skip it, saying so).
engine=""
for tool in docker podman; do
    if command -v "$tool" >/dev/null && "$tool" info >/dev/null 2>&1; then engine=$tool; break; fi
done
if [ -n "$engine" ]; then
    image=tensorplay-check-deploy:$version
    run "image build ($engine)" "$engine" build -q -f deploy/Dockerfile -t "$image" .
    run "image runs as non-root on a fixture" sh -c "
        [ \"\$($engine run --rm $image id -u)\" = 65534 ] &&
        $engine run --rm -v \"\$PWD/fixtures/safetensors:/models:ro\" $image \
            tensorplay audit --fail-on never /models >/dev/null"
else
    echo "check-deploy: no container engine runs here (docker, podman): image build skipped" >&2
fi

if [ "$failed" -ne 0 ]; then
    echo "check-deploy: FAILED" >&2
    exit 1
fi
echo "check-deploy: ok"
