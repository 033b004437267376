"""Audits fixture folders from a moto S3 server and checks the findings are those of the same
folders audited locally (paths and fingerprints aside). Run by scripts/check-remote.sh."""

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import boto3

REPO = Path(__file__).resolve().parent.parent
FAMILIES = ["safetensors", "pytorch", "dcp", "pt2", "numpy", "gguf"]
BUCKET = "tensorplay"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def findings(stdout: str, prefix: str) -> dict:
    report = json.loads(stdout)
    out = {}
    for file in report["files"]:
        path = file["path"]
        for finding in file["findings"]:
            finding.pop("fingerprint", None)
        text = json.dumps(file["findings"], sort_keys=True).replace(path, "<file>")
        out[path.removeprefix(prefix)] = text.replace(prefix, "<root>/")
    return out


def main() -> int:
    binary, moto = sys.argv[1], sys.argv[2]
    port = free_port()
    endpoint = f"http://127.0.0.1:{port}"
    server = subprocess.Popen([moto, "-p", str(port)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    env = dict(os.environ, AWS_ENDPOINT_URL=endpoint, AWS_ACCESS_KEY_ID="test",
               AWS_SECRET_ACCESS_KEY="test", AWS_DEFAULT_REGION="us-east-1")
    env.pop("GITHUB_ACTIONS", None)
    try:
        for _ in range(100):
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                break
            except OSError:
                time.sleep(0.1)
        s3 = boto3.client("s3", endpoint_url=endpoint, aws_access_key_id="test",
                          aws_secret_access_key="test", region_name="us-east-1")
        s3.create_bucket(Bucket=BUCKET)
        for family in FAMILIES:
            for path in sorted((REPO / "fixtures" / family).rglob("*")):
                if path.is_file():
                    s3.upload_file(str(path), BUCKET, str(path.relative_to(REPO / "fixtures")))
        failed = 0
        for family in FAMILIES:
            run = lambda target, *flags: subprocess.run(
                [binary, "audit", "--format", "json", "--color", "never", *flags, target],
                cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
            local = run(f"fixtures/{family}", "--metadata-only")
            remote = run(f"s3://{BUCKET}/{family}")
            same = (local.returncode == remote.returncode and
                    findings(local.stdout, f"fixtures/{family}/")
                    == findings(remote.stdout, f"s3://{BUCKET}/{family}/"))
            note = [l for l in remote.stderr.splitlines() if l.startswith("note:")]
            print(f"check-remote: s3://{BUCKET}/{family}: {'same findings as local' if same else 'DIFFERS'} "
                  f"(exit {remote.returncode}; {note[0] if note else remote.stderr.strip()[:300]})")
            failed += not same
        return 1 if failed else 0
    finally:
        server.terminate()
        server.wait()


if __name__ == "__main__":
    sys.exit(main())
