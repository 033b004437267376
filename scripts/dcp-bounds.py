"""Times tensorplay on the DCP `.metadata` shapes that were time bombs, made by torch's own
dataclasses (`tests/dcp_bounds.rs` writes the same shapes opcode by opcode for the tests).

Usage: .venv-fixtures/bin/python scripts/dcp-bounds.py target/release/tensorplay [WORKDIR]
Prints one Markdown row per shape: size of `.metadata`, verdict, wall time, peak RSS (GNU
time's, of tensorplay alone).
"""

import json
import pickle
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch
from torch.distributed.checkpoint.filesystem import _StorageInfo
from torch.distributed.checkpoint.metadata import (
    ChunkStorageMetadata,
    Metadata,
    MetadataIndex,
    TensorProperties,
    TensorStorageMetadata,
)


def tensor(length, chunks):
    return TensorStorageMetadata(
        properties=TensorProperties(dtype=torch.float32),
        size=torch.Size([length]),
        chunks=[ChunkStorageMetadata(offsets=torch.Size([o]), sizes=torch.Size([s])) for o, s in chunks],
    )


def item(fqn, offset):
    return MetadataIndex(fqn=fqn, offset=torch.Size([0]), index=0), _StorageInfo("__0_0.distcp", offset, 1)


def shapes():
    for n in (6000, 5700):
        chunked = {"w": tensor(n, [(i, 1) for i in range(n)])}
        yield f"one tensor in {n} chunks", Metadata(chunked, storage_data={}), 1
    n = 60_000
    tensors = {f"layer.{i}.weight": tensor(1, [(0, 1)]) for i in range(n)}
    items = dict(item(f"layer.{i}.weight", i) for i in range(n + 1))
    yield f"{n} tensors and one item no tensor names", Metadata(tensors, storage_data=items), n + 1


def main():
    binary = Path(sys.argv[1]).resolve()
    work = Path(sys.argv[2]) if len(sys.argv) > 2 else Path(tempfile.mkdtemp())
    print("| shape | `.metadata` | verdict | wall | peak RSS |")
    print("|---|---|---|---|---|")
    for i, (what, metadata, distcp) in enumerate(shapes()):
        d = work / f"dcp-bounds-{i}"
        d.mkdir(parents=True, exist_ok=True)
        (d / ".metadata").write_bytes(pickle.dumps(metadata))
        (d / "__0_0.distcp").write_bytes(bytes(distcp))
        # GNU time's maximum resident set size of tensorplay alone, in KiB.
        command = ["/usr/bin/time", "-f", "%M", binary, "audit", "--format", "json", str(d)]
        start = time.monotonic()
        out = subprocess.run(command, capture_output=True, text=True)
        wall = time.monotonic() - start
        peak = int(out.stderr.strip().splitlines()[-1])
        finding = json.loads(out.stdout)["files"][0]["findings"][0]
        size = (d / ".metadata").stat().st_size
        print(f"| {what} | {size / 1e6:.2f} MB | {finding['code']}: {finding['message'].split(': ')[-1][:80]} | {wall:.2f} s | {peak / 1024:.0f} MiB |")


if __name__ == "__main__":
    main()
