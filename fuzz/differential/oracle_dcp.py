"""Differential oracle for torch.distributed.checkpoint directories (torch 2.9.1).

What the real loader does, from torch/distributed/checkpoint/:
  - filesystem.py FileSystemReader.read_metadata: `pickle.load` of `<dir>/.metadata` (the C
    unpickler: a dict's repeated key keeps the last value; a second BUILD updates `__dict__`).
    If that raises, state_dict_loader._load_state_dict falls back to `__<rank>.metadata`
    (rank 0 without a process group).
  - FileSystemReader.read_data: for each planned item, `storage_data[MetadataIndex]` (dict
    lookup: MetadataIndex equality is (fqn, offset)), opens `Path(dir) / relative_path` and
    reads only `[offset, offset + length)` through utils._ReaderView; tensors with
    `torch.load(weights_only=True)`, bytes items with `torch.load(weights_only=False)`.
  - Nothing else in the directory is opened.

Interface for the harness (which writes the mutated copies and runs tensorplay):
  applies(path) -> bool
  record(path) -> dict            JSON-able: what dcp.load would read and resolve
  divergences(record, inspect_json, audit_json) -> list[str]
  mutations(path) -> iterator of (label, {relative file name: bytes}); files not named are
                     copied unchanged, a name mapped to None is removed.

Nothing from a checkpoint runs here: .metadata is unpickled by a `pickle.Unpickler` whose
`find_class` records every name and returns DCP's own dataclasses (and torch.Size, dtypes,
layouts, pathlib paths) only, an inert stand-in for anything else; item records are never
loaded.
"""

import io
import itertools
import pickle
from pathlib import Path

import torch
from torch.serialization import _get_layout
from torch.distributed.checkpoint.metadata import (
    BytesStorageMetadata,
    Metadata,
    MetadataIndex,
    TensorStorageMetadata,
)

NAME = "dcp"
METADATA = ".metadata"
SUFFIX = ".distcp"
# Dicts with at most this many keys get every key repeated in turn.
MAX_KEYS = 6

# The names dcp.save writes in .metadata (the Rust side's DCP_GLOBALS): data, not findings.
DCP_GLOBALS = {
    ("torch.distributed.checkpoint.metadata", "Metadata"),
    ("torch.distributed.checkpoint.metadata", "TensorStorageMetadata"),
    ("torch.distributed.checkpoint.metadata", "BytesStorageMetadata"),
    ("torch.distributed.checkpoint.metadata", "ChunkStorageMetadata"),
    ("torch.distributed.checkpoint.metadata", "TensorProperties"),
    ("torch.distributed.checkpoint.metadata", "_MEM_FORMAT_ENCODING"),
    ("torch.distributed.checkpoint.metadata", "MetadataIndex"),
    ("torch.distributed.checkpoint.metadata", "StorageMeta"),
    ("torch.distributed.checkpoint.filesystem", "_StorageInfo"),
    ("pathlib", "PosixPath"),
    ("pathlib", "WindowsPath"),
}


def _torch_data(module, name):
    """torch.Size, a dtype, a layout or a memory format: values torch.load's table holds."""
    if (module, name) == ("torch.serialization", "_get_layout"):
        # How TensorProperties pickles its layout: a name lookup in torch.load's table.
        return _get_layout
    if module != "torch":
        return None
    if name == "Size":
        return torch.Size
    value = getattr(torch, name, None) if name.isidentifier() else None
    if isinstance(value, (torch.dtype, torch.layout, torch.memory_format)):
        return value
    return None


class Inert:
    """Stands in for any global outside DCP's classes: takes any call, state or items."""

    def __init__(self, *args, **kwargs):
        self.args = args

    def __reduce__(self):
        # Written back as the global it stands for (see _Crafting.save_global).
        return (type(self), getattr(self, "args", ()), getattr(self, "state", None))

    def __setstate__(self, state):
        self.state = state

    def __setitem__(self, key, value):
        pass

    def append(self, value):
        pass

    def extend(self, values):
        pass

    def __call__(self, *args, **kwargs):
        return Inert()


class Recording(pickle.Unpickler):
    """The C unpickler (Python's dict and BUILD semantics), every global recorded."""

    def __init__(self, file):
        super().__init__(file)
        self.globals = []

    def find_class(self, module, name):
        self.globals.append([module, name])
        if (module, name) in DCP_GLOBALS:
            return super().find_class(module, name)
        value = _torch_data(module, name)
        if value is not None:
            return value
        return type("Inert", (Inert,), {"_global": (module, name)})

    def persistent_load(self, pid):
        raise pickle.UnpicklingError("persistent ids: plain pickle.load refuses them")


def applies(path):
    p = Path(path)
    return p.is_dir() and (p / METADATA).is_file()


def _unpickle(data):
    unpickler = Recording(io.BytesIO(data))
    try:
        return unpickler.load(), unpickler.globals, None
    except Exception as e:  # noqa: BLE001 - any failure is what dcp.load would hit
        return None, unpickler.globals, f"{type(e).__name__}: {e}"


def record(path):
    d = Path(path)
    data = (d / METADATA).read_bytes()
    md, names, error = _unpickle(data)
    out = {
        "globals": names,
        "unsafe_globals": [g for g in names
                           if tuple(g) not in DCP_GLOBALS and _torch_data(*g) is None],
        "error": error,
        # dcp.load falls back to the rank-local metadata when .metadata cannot be read.
        "fallback_metadata": (d / "__0.metadata").is_file(),
        "reads": [],
        "files": sorted(p.name for p in d.iterdir()),
    }
    if error is None and not isinstance(md, Metadata):
        out["error"] = f"not a Metadata: {type(md).__name__}"
    if out["error"] is None:
        try:
            out["reads"] = _reads(md)
        except Exception as e:  # noqa: BLE001 - a lookup dcp.load would fail on too
            out["error"] = f"{type(e).__name__}: {e}"
            out["reads"] = []
    for r in out["reads"]:
        p = d / r["file"]
        size = p.stat().st_size if _plain(r["file"]) and p.is_file() else None
        if out["error"] is None and (size is None or r["offset"] + r["length"] > size):
            # read_data's open or torch.load of a short view raises: the load fails.
            out["error"] = f"{r['file']}[{r['offset']}..+{r['length']}] cannot be read whole"
    read_files = sorted({r["file"] for r in out["reads"]})
    out["files_read"] = read_files
    out["outside"] = [f for f in read_files if not _plain(f)]
    out["unread_files"] = sorted(
        p.name for p in d.iterdir()
        if p.name.endswith(SUFFIX) and p.name not in read_files and p.is_file()
        and p.stat().st_size > 0)
    out["unread_bytes"] = _unread_bytes(d, out["reads"])
    return out


def _reads(md):
    """Every range a full load reads: one per chunk (the planner's MetadataIndex, equal to
    the saved one) or bytes item, as read_data looks them up in storage_data."""
    reads = []
    for fqn, meta in md.state_dict_metadata.items():
        if isinstance(meta, TensorStorageMetadata):
            keys = [MetadataIndex(fqn, c.offsets) for c in meta.chunks]
        elif isinstance(meta, BytesStorageMetadata):
            keys = [MetadataIndex(fqn)]
        else:
            raise TypeError(f"{fqn}: {type(meta).__name__}")
        for key in keys:
            info = md.storage_data[key]
            reads.append({
                "fqn": fqn,
                "offsets": list(key.offset) if key.offset is not None else None,
                "file": str(info.relative_path),
                "offset": int(info.offset),
                "length": int(info.length),
                "transforms": bool(getattr(info, "transform_descriptors", None)),
            })
    return reads


def _plain(name):
    return name not in ("", ".", "..", METADATA) and "/" not in name and "\\" not in name


def _unread_bytes(d, reads):
    """Per file read, the [start, end) spans no read covers."""
    spans = {}
    for name in sorted({r["file"] for r in reads}):
        p = d / name
        if not _plain(name) or not p.is_file():
            continue
        size = p.stat().st_size
        covered = 0
        gaps = []
        for start, end in sorted((r["offset"], r["offset"] + r["length"])
                                 for r in reads if r["file"] == name):
            if start > covered:
                gaps.append([covered, min(start, size)])
            covered = max(covered, end)
        if covered < size:
            gaps.append([covered, size])
        gaps = [g for g in gaps if g[0] < g[1]]
        if gaps:
            spans[name] = gaps
    return spans


def _verdict(audit_json):
    """(refused, finding texts) of the directory's audit entry."""
    files = (audit_json or {}).get("files") or []
    findings = [f for entry in files for f in entry.get("findings", [])]
    # TP506: refused over a limit of the run, unjudged; it fails closed as TP502 does.
    refused = any(f.get("severity") == "error" and f.get("code") in ("TP502", "TP503", "TP506")
                  for f in findings)
    return refused, " ".join(str(f.get("message", "")) for f in findings)


def divergences(record, inspect_json, audit_json):
    """What dcp.load would read or resolve that tensorplay's report does not cover.

    Read coverage: tensorplay fails closed, so a directory it refuses (an error TP502, TP503
    or TP506) covers every read; one it passes must hold, for each tensor chunk read, a storage
    inside that range of that file, and must have no file or bytes dcp.load leaves unread
    (those are audited by nothing). Globals: every global outside DCP's classes that the
    metadata's pickle resolves is named, refused or not.
    """
    out = []
    refused, texts = _verdict(audit_json)
    reported = {(g.get("module"), g.get("name"))
                for g in (inspect_json or {}).get("unsafe_globals", [])}
    for module, name in record.get("unsafe_globals", []):
        if (module, name) not in reported and f"{module}.{name}" not in texts:
            out.append(f"dcp.load resolves {module}.{name} from .metadata; tensorplay does not name it")
    if refused:
        return out
    if inspect_json is None:
        return out + ["tensorplay neither refused nor inspected the directory"]
    if record.get("error"):
        # dcp.load fails (or falls back to __0.metadata); tensorplay read something.
        if record.get("fallback_metadata"):
            out.append(f"dcp.load falls back to __0.metadata ({record['error']}); tensorplay passed")
        return out
    storages = inspect_json.get("storages", [])
    base = inspect_json.get("path", "")
    for r in record.get("reads", []):
        if r["offsets"] is None:
            continue  # a bytes item: read whole by tensorplay when it passes
        lo, hi = r["offset"], r["offset"] + r["length"]
        if r.get("transforms"):
            # A transformed item (ZStandard) is read from the bytes the transform gives back,
            # which tensorplay names `<file>[lo..hi]`: a storage must lie in those.
            decoded = Path(base) / f"{r['file']}[{lo}..{hi}]"
            inside = any(Path(str(s.get("data_ptr", {}).get("file", ""))) == decoded
                         for s in storages if s.get("data_ptr"))
        else:
            inside = any(
                Path(str(s.get("data_ptr", {}).get("file", ""))) == Path(base) / r["file"]
                and lo <= int(s["data_ptr"].get("offset", -1)) < hi
                for s in storages if s.get("data_ptr"))
        if not inside:
            out.append(f"dcp.load reads {r['file']}[{lo}..{hi}] for chunk {r['offsets']} of "
                       f"'{r['fqn']}'; no storage tensorplay reports lies there")
    for name in record.get("outside", []):
        out.append(f"dcp.load opens '{name}' outside the directory; tensorplay passed")
    for name in record.get("unread_files", []):
        out.append(f"{name} is read by dcp.load never and audited by tensorplay never")
    for name, gaps in record.get("unread_bytes", {}).items():
        out.append(f"bytes {gaps} of {name} are read by dcp.load never and not reported")
    return out


# ---- mutations ----

class _Crafting(pickle._Pickler):
    """The pure-Python pickler, whose dict writer hands each dict to `hook(i, d)` (i counts
    dicts in write order) and writes the pairs it returns after the dict's own."""

    def __init__(self, file, hook):
        super().__init__(file, protocol=4)
        self.hook = hook
        self.count = 0

    def save_dict(self, obj):
        i = self.count
        self.count += 1
        self.write(pickle.EMPTY_DICT)
        self.memoize(obj)
        self._batch_setitems(itertools.chain(obj.items(), self.hook(i, obj)))

    def save_global(self, obj, name=None):
        standing_in = getattr(obj, "_global", None)
        if standing_in is None:
            return super().save_global(obj, name)
        for part in standing_in:
            self.save(part)
        self.write(pickle.STACK_GLOBAL)
        self.memoize(obj)

    dispatch = dict(pickle._Pickler.dispatch)
    dispatch[dict] = save_dict


def _dump(md, hook=lambda i, d: ()):
    buffer = io.BytesIO()
    pickler = _Crafting(buffer, hook)
    pickler.dump(md)
    return buffer.getvalue(), pickler.count


def _moved(value, other):
    """A value that makes a difference: the next int, another file, or a sibling's value."""
    if isinstance(value, bool):
        return not value
    if isinstance(value, int):
        return value + 1
    if isinstance(value, str) and value.endswith(SUFFIX):
        return "__9_9" + SUFFIX
    return other


def _equal_key(key):
    """A key equal to `key` that is another object: 1.0 for 1, a new MetadataIndex."""
    if isinstance(key, bool):
        return int(key)
    if isinstance(key, int):
        return float(key)
    if isinstance(key, MetadataIndex):
        return MetadataIndex(key.fqn, key.offset)
    return key


def mutations(path):
    d = Path(path)
    data = (d / METADATA).read_bytes()
    md, _, error = _unpickle(data)
    distcp = sorted(p for p in d.iterdir() if p.name.endswith(SUFFIX) and p.is_file())
    if error is None and isinstance(md, Metadata):
        # Every dict the metadata pickle writes (every level: Metadata's state, its dicts,
        # each dataclass's state), each key set again (an equal key of another object where
        # one exists: 1.0 for 1, a new MetadataIndex), to its value and to a moved one. Dicts
        # of more than MAX_KEYS keys: their first and last keys.
        sizes = []
        _dump(md, lambda i, obj: sizes.append(len(obj)) or ())
        for i, size in enumerate(sizes):
            which = range(size) if size <= MAX_KEYS else [0, size - 1]
            for k, same in itertools.product(which, (True, False)):
                def hook(j, obj, i=i, k=k, same=same):
                    if j != i or k >= len(obj):
                        return ()
                    keys = list(obj)
                    key = keys[k]
                    other = obj[keys[k - 1]]
                    value = obj[key] if same else _moved(obj[key], other)
                    return [(_equal_key(key), value)]
                yield f"dict{i}-key{k}-{'same' if same else 'moved'}", {
                    METADATA: _dump(md, hook)[0]}
        # Items shifted by a gap inserted before the first item past byte 0 of a file.
        for p in distcp:
            items = [(k, v) for k, v in md.storage_data.items() if v.relative_path == p.name]
            later = [v.offset for _, v in items if v.offset > 0]
            if not later:
                continue
            at = min(later)
            for _, v in items:
                if v.offset >= at:
                    v.offset += 8
            body = p.read_bytes()
            yield f"gap-in-{p.name}", {
                METADATA: _dump(md)[0], p.name: body[:at] + b"\0" * 8 + body[at:]}
            for _, v in items:
                if v.offset >= at + 8:
                    v.offset -= 8
    # Files and bytes no item names.
    first = distcp[0].read_bytes() if distcp else b""
    yield "extra-distcp-copy", {"__9_9" + SUFFIX: first}
    yield "extra-distcp-empty", {"__9_9" + SUFFIX: b""}
    for p in distcp:
        body = p.read_bytes()
        yield f"append-copy-to-{p.name}", {p.name: body + body}
        yield f"append-byte-to-{p.name}", {p.name: body + b"\0"}
    if not distcp:
        return
    # A metadata that fails to load, beside a rank-local one dcp.load then reads instead.
    yield "broken-metadata-with-fallback", {METADATA: data[:-1], "__0.metadata": data}


if __name__ == "__main__":
    import json
    import sys

    for arg in sys.argv[1:]:
        print(json.dumps(record(arg), indent=2, sort_keys=True))
        print(sum(1 for _ in mutations(arg)), "mutations", file=sys.stderr)
