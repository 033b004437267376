"""Which loaders accept a file, whatever its name, and what each would unpickle: recorded,
never run.

A user hands a file to the loader its name or their habit suggests, and each real loader
decides by its own full rules what the bytes are:

- `np.load(path, allow_pickle=True)`: `\\x93NUMPY` is a `.npy` (an object array is unpickled);
  a file starting `PK\\x03\\x04` or `PK\\x05\\x06` is an `NpzFile`, whose `[key]` unpickles the
  object array of ANY member that starts `\\x93NUMPY`, at any path; anything else goes to
  `pickle.load`. Its two `pickle.load` calls (`numpy/lib/_npyio_impl.py`, `read_array` in
  `numpy/lib/format.py`, numpy 2.2.6) are handed a recording module; every member is read, as
  `dict(np.load(...))` reads them.
- `joblib.load(path)`: a compressor chosen by magic (zlib `x`, gzip, bz2 `BZ`, xz, lzma,
  lz4, joblib's old `ZF`), decompressed for real, then joblib's pure-Python `NumpyUnpickler`
  (`ZipNumpyUnpickler` for `ZF`) with `find_class` recording.
- `pickle.load(open(path, "rb"))`: the C unpickler, `find_class` recording.
- `torch.load(path, weights_only=False, pickle_module=<recording module>)`: torch's own
  choice (a zip by its first four bytes, else `tarfile`, else the legacy stacked pickles,
  the first through `pickle_module.load`), its zip and tar readers run for real. An archive
  torch would hand to `torch.jit.load` is recorded as such and not loaded.

Recording: `find_class` notes `(module, name)` as the stream names it and returns an inert
stand-in (`oracle_pickle`), so the loader reads on and every global it would reach is listed.
Nothing a file names is imported or called, with two exceptions that cannot run a file's code:
torch.load resolves the names in torch's own weights-only table (what `weights_only=True`
calls anyway), and joblib.load resolves its array wrapper, `numpy.dtype` and
`copyreg._reconstructor` (the wrapper reads the array bytes that follow it in the stream,
which a stand-in would leave to be misread as opcodes).

A divergence: a loader would import a global outside torch's weights-only table that the
audit names nowhere (TP501, or an error finding's message); or a file such a loader accepts
that the audit passes, or, met in a directory, skips.
"""

import bz2
import contextlib
import functools
import gzip
import io
import lzma
import os
import pickle
import struct
import tarfile
import types
import unittest.mock as mock
import warnings
import zipfile
import zlib

import oracle_pickle
from oracle_pickle import bounded, mapped

NAME = "accept"
LOADERS = ("np.load", "joblib.load", "pickle.load", "torch.load")


class _Inert(oracle_pickle._Inert):
    """oracle_pickle's stand-in, with the dtype joblib asks an object array for after reading
    it (`_ensure_native_byte_order`), so one stand-in array does not end its reading."""

    @property
    def dtype(self):
        import numpy

        return numpy.dtype(object)


def _stand_in(module, name):
    return oracle_pickle._InertType(f"{module}.{name}", (_Inert,), {})


class _Log:
    """What one loader's recorders saw: the globals, in order, and how many pickle streams
    it began to read."""

    def __init__(self):
        self.globals = []
        self.streams = 0

    def find_class(self, resolve=None):
        log = self

        def find_class(unpickler, module, name):
            log.globals.append([module, name])
            real = resolve(module, name) if resolve else None
            return real if real is not None else _stand_in(module, name)

        return find_class


def _recording_pickle(log, resolve=None):
    """A module that stands in for `pickle` where a loader calls `pickle.load` or subclasses
    `pickle.Unpickler`: the C unpickler, its `find_class` recording."""
    find_class = log.find_class(resolve)

    class Unpickler(pickle.Unpickler):
        def __init__(self, *args, **kwargs):
            log.streams += 1
            super().__init__(*args, **kwargs)

        def find_class(self, module, name):
            return find_class(self, module, name)

    def load(file, **kwargs):
        return Unpickler(file, **kwargs).load()

    def loads(data, /, **kwargs):
        return load(io.BytesIO(data), **kwargs)

    # torch checks the module's __name__ (`dill`); numpy raises pickle.UnpicklingError.
    module = types.ModuleType("pickle")
    module.__dict__.update({k: v for k, v in vars(pickle).items() if not k.startswith("__")})
    module.Unpickler, module.load, module.loads = Unpickler, load, loads
    return module


def _outcome(log, run):
    """Runs one recorded loading: did it return, what did it raise."""
    entry = {"accepts": False, "unpickled": 0, "globals": log.globals, "error": None}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            run()
            entry["accepts"] = True
        except MemoryError:
            entry["error"] = "MemoryError"
        except Exception as e:  # noqa: BLE001 - every refusal is part of the answer
            entry["error"] = f"{type(e).__name__}: {e}"[:300]
    entry["unpickled"] = log.streams
    return entry


def record_np_load(path):
    import numpy as np
    from numpy.lib import _npyio_impl, format as npformat

    log = _Log()
    module = _recording_pickle(log)

    def run():
        with mock.patch.object(npformat, "pickle", module), mock.patch.object(_npyio_impl, "pickle", module):
            loaded = np.load(path, allow_pickle=True)
            if isinstance(loaded, _npyio_impl.NpzFile):
                with loaded:
                    for key in loaded.files:
                        loaded[key]

    return _outcome(log, run)


# What joblib.load resolves for real: its array wrapper reads the raw array bytes after it
# in the stream (a stand-in would leave them to the unpickler as opcodes), and builds it from
# these. The old formats' wrappers (`numpy_pickle_compat`) stay stand-ins: they open
# companion files named by the pickle.
_JOBLIB_REAL = {
    ("joblib.numpy_pickle", "NumpyArrayWrapper"),
    ("numpy", "dtype"),
    ("copyreg", "_reconstructor"),
    ("copy_reg", "_reconstructor"),
    ("builtins", "object"),
    ("__builtin__", "object"),
}


def _joblib_resolve(module, name):
    if (module, name) not in _JOBLIB_REAL:
        return None
    module, name = mapped(module, name)
    return getattr(__import__(module, fromlist=[name]), name)


def joblib_never_returns(path):
    """Whether joblib 1.6.0 would spin on this file: after the end of a zlib or gzip stream
    its reader (`BinaryZlibFile._fill_buffer`) feeds the bytes that follow to the finished
    decompressor, which returns nothing, forever, and `unused_data` grows. Its first read
    asks for 1 MiB, so a stream that inflates to less never reaches the unpickler."""
    with open(path, "rb") as f:
        data = f.read()
    wbits = {b"x": 15, b"\x1f": 31}.get(data[:1])
    if wbits is None or (wbits == 31 and data[:2] != b"\x1f\x8b"):
        return False
    inflate = zlib.decompressobj(wbits)
    try:
        size = len(inflate.decompress(data, 1 << 20))
    except zlib.error:
        return False
    return inflate.eof and bool(inflate.unused_data) and size < (1 << 20)


def record_joblib_load(path):
    try:
        import joblib
        from joblib import numpy_pickle, numpy_pickle_compat
    except ImportError as e:
        return {"accepts": False, "unpickled": 0, "globals": [], "error": None,
                "unavailable": f"{type(e).__name__}: {e}"}
    if joblib_never_returns(path):
        return {"accepts": False, "unpickled": 0, "globals": [], "error": None,
                "never_returns": "bytes after the zlib or gzip stream (not run here)"}
    log = _Log()
    find_class = log.find_class(_joblib_resolve)
    inits = []

    def counted(cls):
        original = cls.__init__

        def __init__(self, *args, **kwargs):
            log.streams += 1
            original(self, *args, **kwargs)

        inits.append(mock.patch.object(cls, "__init__", __init__))

    counted(numpy_pickle.NumpyUnpickler)
    counted(numpy_pickle_compat.ZipNumpyUnpickler)

    def run():
        with contextlib.ExitStack() as stack:
            for cls in (numpy_pickle.NumpyUnpickler, numpy_pickle_compat.ZipNumpyUnpickler):
                stack.enter_context(mock.patch.object(cls, "find_class", find_class))
            for patch in inits:
                stack.enter_context(patch)
            joblib.load(path)

    return _outcome(log, run)


def record_pickle_load(path):
    log = _Log()
    module = _recording_pickle(log)

    def run():
        with open(path, "rb") as f:
            module.load(f)

    return _outcome(log, run)


_TORCH_SAFE = None


def _torch_table():
    """torch's weights-only table, `module.name` -> the object; empty without torch."""
    global _TORCH_SAFE
    if _TORCH_SAFE is None:
        try:
            from torch import _weights_only_unpickler as wo

            _TORCH_SAFE = dict(wo._get_allowed_globals())
        except ImportError:
            _TORCH_SAFE = {}
    return _TORCH_SAFE


def _torch_resolve(module, name):
    return _torch_table().get(f"{module}.{name}")


class _TorchScript(Exception):
    """torch.load handed the archive to torch.jit.load, which is not run here."""


def record_torch_load(path):
    try:
        import torch
    except ImportError as e:
        return {"accepts": False, "unpickled": 0, "globals": [], "error": None,
                "unavailable": f"{type(e).__name__}: {e}"}
    log = _Log()
    module = _recording_pickle(log, _torch_resolve)
    handed_to_jit = []

    def jit_load(*args, **kwargs):
        handed_to_jit.append(True)
        raise _TorchScript()

    def run():
        with mock.patch.object(torch.jit, "load", jit_load):
            torch.load(path, map_location="cpu", pickle_module=module, weights_only=False)

    entry = _outcome(log, run)
    if handed_to_jit:
        entry["torchscript"] = True
        entry["error"] = "handed to torch.jit.load (not run here)"
    return entry


RECORDERS = {
    "np.load": record_np_load,
    "joblib.load": record_joblib_load,
    "pickle.load": record_pickle_load,
    "torch.load": record_torch_load,
}


def applies(path):
    return os.path.isfile(path)


def record(path):
    rec = {"path": os.fspath(path), "loaders": {name: RECORDERS[name](path) for name in LOADERS}}
    _tally["inputs"] += 1
    unsafe = imported(rec, set(_torch_table()))
    if unsafe:
        _tally["imports"] += 1
        for loader in {loader for _, loaders in unsafe.values() for loader in loaders}:
            _tally["by"][loader] += 1
    return rec


def imported(rec, allowed=()):
    """`{module.name: (spellings, loaders)}` of every global a loader would import that lies
    outside `allowed` (torch's weights-only table): the name as the stream writes it, the
    spellings a report may give it (as written, as the default `find_class` maps a protocol
    0-2 name), and the loaders that reach it."""
    out, seen = {}, {}
    for loader, entry in rec["loaders"].items():
        if entry.get("torchscript"):
            continue
        for module, name in entry["globals"]:
            # A crafted stream names one long global thousands of times: judged once.
            if seen.setdefault((module, name), set()) >= {loader}:
                continue
            seen[(module, name)].add(loader)
            full, alt = f"{module}.{name}", ".".join(mapped(module, name))
            if full in allowed or alt in allowed:
                continue
            if full not in out:
                out[full] = ({_bounded(full), _bounded(alt)}, [])
            if loader not in out[full][1]:
                out[full][1].append(loader)
    return out


@functools.lru_cache(maxsize=4096)
def _bounded(name):
    return bounded(name)


def _entry(audit_json, path):
    """The audit's entry for `path` and, if it was passed over, the reason."""
    if not isinstance(audit_json, dict):
        return None, None
    files = audit_json.get("files") or []
    for f in files:
        if f.get("path") == path:
            return f, None
    for s in audit_json.get("skipped") or []:
        if s.get("path") == path:
            return None, s.get("reason", "")
    # A file named on the command line is the report's one entry, under the name given.
    if len(files) == 1 and not audit_json.get("skipped"):
        return files[0], None
    return None, None


def named_in(entry):
    """The globals the entry's TP501 findings name, and the messages of its errors (a refusal
    may name what it refuses)."""
    names, texts = set(), []
    for f in entry.get("findings") or []:
        g = f.get("global") or {}
        if f.get("code") == "TP501" and g.get("module") is not None:
            names.add(f"{g['module']}.{g['name']}")
        if f.get("severity") == "error":
            texts.append(f.get("message", ""))
    names.update(oracle_pickle.reported_globals({"files": [entry]}))
    return names, texts


def divergences(rec, inspect_json, audit_json, allowed=()):
    unsafe = imported(rec, allowed)
    if not unsafe:
        return []
    entry, skipped = _entry(audit_json, rec["path"])
    first, (_, by) = next(iter(unsafe.items()))
    reaches = f"{', '.join(by)} would import {_bounded(first)}"
    if skipped is not None:
        return [f"skipped ({skipped}), though {reaches}"]
    if entry is None:
        return [f"not audited, though {reaches}"]
    out = []
    if not any(f.get("severity") == "error" for f in entry.get("findings") or []):
        out.append(f"passes, though {reaches}")
    names, texts = named_in(entry)
    for full, (spellings, loaders) in unsafe.items():
        if spellings & names or any(s in t for s in spellings for t in texts):
            continue
        out.append(f"{', '.join(loaders)} would import {_bounded(full)}; the audit names no such global")
    return out


_tally = {"inputs": 0, "imports": 0, "by": {name: 0 for name in LOADERS}}


def summary():
    by = ", ".join(f"{k} {v}" for k, v in _tally["by"].items())
    return (f"accept: {_tally['imports']} of {_tally['inputs']} inputs have a loader that would "
            f"import a global outside the weights-only table ({by})")


# ---- polyglot-building variants ----

def npy_object_array(stream):
    """A `.npy` of one object element whose pickle is `stream`: `read_array` hands whatever
    follows the header to `pickle.load`."""
    header = b"{'descr': '|O', 'fortran_order': False, 'shape': (1,), }"
    pad = -(10 + len(header) + 1) % 64
    header += b" " * pad + b"\n"
    return b"\x93NUMPY\x01\x00" + struct.pack("<H", len(header)) + header + stream


def _zip_info(name):
    info = zipfile.ZipInfo(name, date_time=(1980, 1, 1, 0, 0, 0))
    info.compress_type = zipfile.ZIP_STORED
    info.external_attr = 0o644 << 16
    return info


def npz(members):
    """An archive of `{name: bytes}`, stored, fixed dates (np.savez's layout without its
    zip64 extras)."""
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        for name, data in members.items():
            z.writestr(_zip_info(name), data)
    return buf.getvalue()


def savez(members):
    """An archive as `np.savez` writes it (every member opened with `force_zip64=True`, so
    each local header carries a zip64 extra field), with fixed dates."""
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        for name, data in members.items():
            with z.open(zipfile.ZipInfo(name, date_time=(1980, 1, 1, 0, 0, 0)), "w", force_zip64=True) as f:
                f.write(data)
    return buf.getvalue()


def append_member(archive, name, data):
    """`archive` with one more member: written after the others, the central directory
    rewritten after it (zipfile's append mode)."""
    buf = io.BytesIO(archive)
    with zipfile.ZipFile(buf, "a") as z:
        z.writestr(_zip_info(name), data)
    return buf.getvalue()


def gzip_with_extra(data, extra_len=1000):
    """A gzip member whose header carries an FEXTRA field of `extra_len` bytes (one subfield)
    before the deflated data: the compressed bytes start past any fixed-size window."""
    body = b"tensorplay fixture padding " * (extra_len // 27 + 1)
    extra = b"TP" + struct.pack("<H", extra_len - 4) + body[: extra_len - 4]
    deflate = zlib.compressobj(9, zlib.DEFLATED, -15)
    raw = deflate.compress(data) + deflate.flush()
    header = b"\x1f\x8b\x08\x04" + b"\x00\x00\x00\x00" + b"\x02\xff" + struct.pack("<H", len(extra))
    return header + extra + raw + struct.pack("<II", zlib.crc32(data), len(data) & 0xFFFFFFFF)


def zfile(data):
    """joblib's format before 0.10 (`numpy_pickle_compat.write_zfile`): `ZF`, the length in
    hex padded to 19 characters, then zlib."""
    return b"ZF" + hex(len(data)).encode().ljust(19) + zlib.compress(data, 1)


def _lz4(data):
    try:
        import lz4.frame
    except ImportError:
        return None
    return lz4.frame.compress(data)


# Every compressor joblib.load detects by magic, as joblib writes each (lz4 when the `lz4`
# package is there).
COMPRESSORS = {
    "zlib": lambda d: zlib.compress(d, 3),
    "gzip": lambda d: gzip.compress(d, mtime=0),
    "gzip-fextra": gzip_with_extra,
    "bz2": bz2.compress,
    "xz": lambda d: lzma.compress(d, format=lzma.FORMAT_XZ),
    "lzma": lambda d: lzma.compress(d, format=lzma.FORMAT_ALONE),
    "lz4": _lz4,
    "zf": zfile,
}


def long_binunicode(stream, n=600):
    """A first operand longer than any sniffing window: BINUNICODE of `n` bytes, POP, then
    `stream` (PROTO may come anywhere; both unpicklers read on)."""
    text = (b"tensorplay acceptance fixture, a long first operand. " * (n // 50 + 1))[:n]
    return b"X" + struct.pack("<I", n) + text + b"0" + stream


def long_unicode_line(stream, n=700):
    """The same with protocol 0's UNICODE: a line of `n` characters, POP, then `stream`."""
    text = (b"tensorplay acceptance fixture, a long protocol 0 line. " * (n // 50 + 1))[:n]
    return b"V" + text + b"\n0" + stream


def safetensors_pickle(call):
    """Valid safetensors and a pickle at once (`oracle_pickle._safetensors_polyglot`, the
    header no longer than it must be): the length's low byte is UNICODE (`V`), which runs to
    the header's last byte, a newline; then POP, `call` and STOP, the bytes of a U8 tensor."""
    tail = b"0" + call + b"."
    text = b'{"x":{"dtype":"U8","shape":[%d],"data_offsets":[0,%d]}}' % (len(tail), len(tail))
    length = len(text) + 1 + (0x56 - len(text) - 1) % 256
    header = text + b" " * (length - len(text) - 1) + b"\n"
    return length.to_bytes(8, "little") + header + tail


def gguf_pickle(stream):
    """A file that starts like GGUF (magic, version 3) and is a pickle: `G` is BINFLOAT, its
    8 bytes run to the tensor count's low byte; the next byte, `V`, is a UNICODE line that
    runs to a newline in a metadata string, after which `stream` follows. GGUFReader refuses
    it (22 016 tensor infos it cannot find); no smaller count lets the pickle read on."""
    key = b"general.architecture"
    value = b"llama\n0" + stream
    return (b"GGUF" + struct.pack("<I", 3) + b"\x00V" + b"\x00" * 6 + struct.pack("<Q", 1)
            + struct.pack("<Q", len(key)) + key + struct.pack("<I", 8)
            + struct.pack("<Q", len(value)) + value)


def tar_pickle(name_stream, storages_stream, pickle_stream=b"}."):
    """A tar torch.load opens (`storages`, `tensors`, `pickle` members) whose first member's
    NAME is a pickle: `pickle.load` of the file runs `name_stream`, torch.load runs
    `storages_stream` (then zero storages, no views, no tensors, `pickle_stream`)."""
    assert len(name_stream) < 100 and b"\x00" not in name_stream and b"/" not in name_stream
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.USTAR_FORMAT) as t:
        members = [
            (name_stream.decode("utf-8", "surrogateescape"), b"tensorplay fixture\n"),
            ("storages", storages_stream + b"0K\x00." + b"]."),
            ("tensors", b"K\x00."),
            ("pickle", pickle_stream),
        ]
        for name, data in members:
            info = tarfile.TarInfo(name)
            info.size, info.mtime, info.mode = len(data), 0, 0o644
            info.uname = info.gname = ""
            t.addfile(info, io.BytesIO(data))
        end = t.offset
    # The two zero blocks that end the archive, without tarfile's padding to 10 KiB.
    return buf.getvalue()[: end + 2 * tarfile.BLOCKSIZE]


# A leading end-of-central-directory record of an empty archive: np.load takes the file for a
# zip by it, and zipfile finds the real archive after it (the prepended bytes are allowed).
EMPTY_EOCD = b"PK\x05\x06" + b"\x00" * 18


def format_of(data):
    """torch.load's choice for these bytes (`oracle_pickle.torch_format`)."""
    if data[:4] == b"PK\x03\x04":
        return "zip"
    try:
        with tarfile.open(fileobj=io.BytesIO(data), mode="r:", format=tarfile.PAX_FORMAT):
            return "tar"
    except Exception:  # noqa: BLE001 - tarfile raises more than TarError on junk
        return "pickle"


def _streams(data):
    """Payload streams for a variant: the input's own bytes when they are a pickle, and a call
    of os.system in some protocol's spelling."""
    call = oracle_pickle.CALLS
    out = [c + b"." for c in call]
    if format_of(data) == "pickle" and not _compressed(data):
        out.append(data)
    return out


def _compressed(data):
    return data[:1] == b"x" or data[:2] in (b"\x1f\x8b", b"BZ", b"\x5d\x00", b"ZF") or \
        data[:5] == b"\xfd7zXZ" or data[:4] == b"\x04\x22\x4d\x18"


def mutations(path, rng):
    with open(path, "rb") as f:
        data = f.read(1 << 20)
    streams = _streams(data)
    pick = lambda: rng.choice(streams)  # noqa: E731
    call = lambda: rng.choice(oracle_pickle.CALLS) + b"."  # noqa: E731
    if data[:4] == b"PK\x03\x04":
        try:
            with zipfile.ZipFile(io.BytesIO(data)) as z:
                names = z.namelist()
            folder = names[0].split("/")[0] + "/" if names and "/" in names[0] else ""
            member = next(n for n in (f"{folder}x{i}.npy" for i in range(len(names) + 1)) if n not in names)
            yield "zip + an object .npy member", append_member(data, member, npy_object_array(call()))
            unnamed = append_member(data, "a/b/weights", npy_object_array(call()))
            yield "zip + an object array under another name", unnamed
            yield "zip behind an empty end record", EMPTY_EOCD + data
        except (zipfile.BadZipFile, ValueError, OSError, EOFError):
            pass
    depth = rng.randrange(0, 4)
    nested = "/".join(["d"] * depth + ["x.npy"])
    members = {"w.npy": npy_object_array(b"N."), nested: npy_object_array(call())}
    yield f"npz with an object member at {nested}", npz(members)
    yield "npz behind an empty end record", EMPTY_EOCD + npz({nested: npy_object_array(call())})
    savez_layout = savez({"x.npy": npy_object_array(call())})
    yield "np.savez's layout behind an empty end record", EMPTY_EOCD + savez_layout
    yield "npy object array", npy_object_array(pick())
    for name, compress in COMPRESSORS.items():
        packed = compress(pick())
        if packed is not None:
            yield f"{name} around a pickle", packed
    yield "long BINUNICODE first", long_binunicode(pick(), rng.choice([513, 600, 4096]))
    yield "long UNICODE line first", long_unicode_line(pick(), rng.choice([513, 700, 4096]))
    yield "gzip of a long first operand", gzip.compress(long_binunicode(pick()), mtime=0)
    yield "GGUF magic, then a pickle", gguf_pickle(call())
    yield "safetensors header, then a pickle", safetensors_pickle(rng.choice(oracle_pickle.CALLS))
    name_call = b"cposix\nsystem\n(Vtrue\ntR."
    yield "tar whose first name is a pickle", tar_pickle(name_call, rng.choice(oracle_pickle.CALLS))
    if format_of(data) == "pickle" and data[:2] == b"\x80\x02":
        # A legacy torch.save: the call inside the first pickle, before the magic number.
        yield "a call before the first value", data[:2] + call()[:-1] + b"0" + data[2:]
