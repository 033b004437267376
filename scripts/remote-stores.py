"""Audits fixture folders from moto's S3 server and Azurite's Blob service and checks the
findings are those of the same folders audited locally (paths and fingerprints aside). Run by
scripts/check-remote.sh:

    python scripts/remote-stores.py TENSORPLAY MOTO_SERVER AZURITE_BLOB
"""

import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
FAMILIES = ["safetensors", "pytorch", "dcp", "pt2", "numpy", "gguf"]
BUCKET = "tensorplay"
# Azurite's well-known development account (public, documented by Microsoft).
AZURITE_KEY = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for(port: int) -> None:
    for _ in range(200):
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return
        except OSError:
            time.sleep(0.1)
    raise SystemExit(f"check-remote: nothing listens on port {port}")


def fixture_files():
    for family in FAMILIES:
        for path in sorted((REPO / "fixtures" / family).rglob("*")):
            if path.is_file():
                yield path, str(path.relative_to(REPO / "fixtures"))


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


def compare(binary: str, scheme: str, env: dict) -> int:
    failed = 0
    for family in FAMILIES:
        def run(target, *flags):
            return subprocess.run(
                [binary, "audit", "--format", "json", "--color", "never", *flags, target],
                cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
        local = run(f"fixtures/{family}", "--metadata-only")
        remote = run(f"{scheme}://{BUCKET}/{family}")
        same = (local.returncode == remote.returncode
                and findings(local.stdout, f"fixtures/{family}/")
                == findings(remote.stdout, f"{scheme}://{BUCKET}/{family}/"))
        note = [l for l in remote.stderr.splitlines() if l.startswith("note:")]
        print(f"check-remote: {scheme}://{BUCKET}/{family}: "
              f"{'same findings as local' if same else 'DIFFERS'} (exit {remote.returncode}; "
              f"{note[0] if note else remote.stderr.strip()[:300]})")
        failed += not same
    return failed


def s3(binary: str, moto: str) -> int:
    import boto3

    port = free_port()
    endpoint = f"http://127.0.0.1:{port}"
    server = subprocess.Popen([moto, "-p", str(port)], stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL)
    try:
        wait_for(port)
        client = boto3.client("s3", endpoint_url=endpoint, aws_access_key_id="test",
                              aws_secret_access_key="test", region_name="us-east-1")
        client.create_bucket(Bucket=BUCKET)
        for path, key in fixture_files():
            client.upload_file(str(path), BUCKET, key)
        env = dict(os.environ, AWS_ENDPOINT_URL=endpoint, AWS_ACCESS_KEY_ID="test",
                   AWS_SECRET_ACCESS_KEY="test", AWS_DEFAULT_REGION="us-east-1")
        env.pop("GITHUB_ACTIONS", None)
        return compare(binary, "s3", env)
    finally:
        server.terminate()
        server.wait()


def azure(binary: str, azurite: str) -> int:
    from azure.storage.blob import BlobServiceClient

    port = free_port()
    endpoint = f"http://127.0.0.1:{port}"
    with tempfile.TemporaryDirectory() as data:
        server = subprocess.Popen(
            [azurite, "--blobHost", "127.0.0.1", "--blobPort", str(port), "--location", data,
             "--silent", "--skipApiVersionCheck"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            wait_for(port)
            connection = (f"DefaultEndpointsProtocol=http;AccountName=devstoreaccount1;"
                          f"AccountKey={AZURITE_KEY};BlobEndpoint={endpoint}/devstoreaccount1;")
            container = BlobServiceClient.from_connection_string(connection).create_container(BUCKET)
            for path, key in fixture_files():
                with open(path, "rb") as f:
                    container.upload_blob(key, f)
            env = dict(os.environ, AZURE_STORAGE_USE_EMULATOR="true",
                       AZURITE_BLOB_STORAGE_URL=endpoint)
            env.pop("GITHUB_ACTIONS", None)
            return compare(binary, "az", env)
        finally:
            server.terminate()
            server.wait()


def main() -> int:
    binary, moto, azurite = sys.argv[1:4]
    failed = s3(binary, moto) + azure(binary, azurite)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
