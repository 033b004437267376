"""Measures a remote metadata audit of a large sharded safetensors set: N shards (sparse files,
each claiming SHARD_MIB of tensor data behind a real header) and their index, served by a
loopback S3-compatible server written here (ListObjectsV2, HEAD, ranged GET) that counts the
requests and bytes it serves. Prints a Markdown row for BENCHMARKS.md.

    python3 scripts/bench-remote.py [--shards 100] [--shard-mib 210] [--latency-ms 0] [--jobs N]
        [--binary target/release/tensorplay]

--latency-ms holds each answer back that long, as a store across a network does (a loopback
server answers in microseconds, which hides whether requests wait for each other); --jobs is
passed to the audit.
"""

import argparse
import json
import os
import struct
import subprocess
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, unquote, urlparse

BUCKET = "bench"
served = {"requests": 0, "bytes": 0}
lock = threading.Lock()


def write_shards(root: Path, shards: int, shard_mib: int) -> int:
    """Shards of 24 tensors each in the layout of a decoder's layers; returns bytes claimed."""
    weight_map, claimed = {}, 0
    per_tensor = shard_mib * (1 << 20) // 24 // 2 * 2
    for s in range(shards):
        name = f"model-{s + 1:05d}-of-{shards:05d}.safetensors"
        header, offset = {"__metadata__": {"format": "pt"}}, 0
        for t in range(24):
            tensor = f"model.layers.{s}.block.{t}.weight"
            header[tensor] = {"dtype": "BF16", "shape": [per_tensor // 2], "data_offsets": [offset, offset + per_tensor]}
            weight_map[tensor] = name
            offset += per_tensor
        text = json.dumps(header, separators=(",", ":")).encode()
        text += b" " * (-len(text) % 8)
        with open(root / name, "wb") as f:
            f.write(struct.pack("<Q", len(text)) + text)
            f.truncate(8 + len(text) + offset)  # sparse: no data blocks written
        claimed += 8 + len(text) + offset
    index = {"metadata": {"total_size": claimed}, "weight_map": weight_map}
    (root / "model.safetensors.index.json").write_text(json.dumps(index, indent=2))
    return claimed


def handler(root: Path, latency: float):
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args):
            pass

        def send(self, status, headers, body=b""):
            time.sleep(latency)
            self.send_response(status)
            for k, v in headers.items():
                self.send_header(k, v)
            self.send_header("Content-Length", str(len(body)))
            self.send_header("Last-Modified", "Wed, 02 Dec 2026 00:00:00 GMT")
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(body)
            with lock:
                served["requests"] += 1
                served["bytes"] += len(body) if self.command != "HEAD" else 0

        def do_HEAD(self):
            self.do_GET()

        def do_GET(self):
            url = urlparse(self.path)
            parts = unquote(url.path).lstrip("/").split("/", 1)
            if parts[0] != BUCKET:
                return self.send(404, {})
            if len(parts) == 1:
                prefix = parse_qs(url.query).get("prefix", [""])[0]
                items = "".join(
                    f"<Contents><Key>{p.name}</Key><LastModified>2026-12-02T00:00:00.000Z</LastModified>"
                    f"<ETag>&quot;v1&quot;</ETag><Size>{p.stat().st_size}</Size></Contents>"
                    for p in sorted(root.iterdir()) if p.name.startswith(prefix.removeprefix("model/")) or prefix in ("", "model/"))
                body = (f"<?xml version=\"1.0\" encoding=\"UTF-8\"?><ListBucketResult><Name>{BUCKET}</Name>"
                        f"<IsTruncated>false</IsTruncated>{items.replace('<Key>', '<Key>model/')}</ListBucketResult>").encode()
                return self.send(200, {"Content-Type": "application/xml"}, body)
            path = root / parts[1].removeprefix("model/")
            if not path.is_file():
                return self.send(404, {})
            size = path.stat().st_size
            rng = self.headers.get("Range")
            if not rng:
                return self.send(200, {"ETag": '"v1"'}, b"" if self.command == "HEAD" else path.read_bytes())
            start, end = (int(x) for x in rng.removeprefix("bytes=").split("-"))
            end = min(end, size - 1)
            with open(path, "rb") as f:
                f.seek(start)
                body = f.read(end - start + 1)
            self.send(206, {"ETag": '"v1"', "Content-Range": f"bytes {start}-{end}/{size}"}, body)

    return Handler


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shards", type=int, default=100)
    ap.add_argument("--shard-mib", type=int, default=210)
    ap.add_argument("--latency-ms", type=float, default=0.0)
    ap.add_argument("--jobs", type=int)
    ap.add_argument("--binary", default="target/release/tensorplay")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        claimed = write_shards(root, args.shards, args.shard_mib)
        server = ThreadingHTTPServer(("127.0.0.1", 0), handler(root, args.latency_ms / 1000))
        threading.Thread(target=server.serve_forever, daemon=True).start()
        env = dict(os.environ, AWS_ENDPOINT_URL=f"http://127.0.0.1:{server.server_port}",
                   AWS_ACCESS_KEY_ID="bench", AWS_SECRET_ACCESS_KEY="bench", AWS_DEFAULT_REGION="us-east-1")
        start = time.monotonic()
        jobs = ["--jobs", str(args.jobs)] if args.jobs else []
        run = subprocess.run([args.binary, "audit", "--format", "json", *jobs, f"s3://{BUCKET}/model"],
                             env=env, capture_output=True, text=True)
        wall = time.monotonic() - start
        server.shutdown()
        report = json.loads(run.stdout)
        note = next((l for l in run.stderr.splitlines() if l.startswith("note:")), "")
        print(f"exit {run.returncode}; {report['summary']['tensors']} tensors; {note}")
        setting = f", {args.latency_ms:g} ms a request" if args.latency_ms else ""
        setting += f", --jobs {args.jobs}" if args.jobs else ""
        print(f"| metadata audit of `s3://` {args.shards} shards + index, {claimed / 1e9:.1f} GB claimed{setting} "
              f"| {served['bytes'] / 1e6:.1f} MB served in {served['requests']} requests "
              f"({100 * served['bytes'] / claimed:.3f} % of the set) | {wall:.1f} s |")


if __name__ == "__main__":
    main()
