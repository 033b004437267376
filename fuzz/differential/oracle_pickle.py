"""What CPython's C unpickler and torch.load would do with a file's pickles, recorded, never run.

`record(path)` follows torch.load's own choice of format (torch/serialization.py: a zip when
the file starts with a local header, else tarfile, else pickle streams) and runs every pickle
it would run through `_pickle.Unpickler` (the C unpickler `pickle.load` and `torch.load` use)
with `find_class` and `persistent_load` replaced by recorders that return inert stand-ins.
Nothing named by a file is imported, called or evaluated: the stand-ins are fresh classes.
"""

import _compat_pickle
import io
import os
import pickle
import tarfile
import zipfile

NAME = "pickle"


class _Inert:
    """What every global, call and persistent id becomes: accepts anything, does nothing."""

    def __new__(cls, *args, **kwargs):
        return object.__new__(cls)

    def __init__(self, *args, **kwargs):
        pass

    def __setstate__(self, state):
        pass

    def append(self, value):
        pass

    def extend(self, values):
        pass

    def add(self, value):
        pass

    def __setitem__(self, key, value):
        pass


class _InertType(type):
    # REDUCE calls the global: the call makes another inert object, nothing else.
    def __call__(cls, *args, **kwargs):
        return object.__new__(cls)


def _stand_in(label):
    return _InertType(label, (_Inert,), {})


def mapped(module, name):
    """The name the default `find_class` would import for a protocol 0-2 stream."""
    if (module, name) in _compat_pickle.NAME_MAPPING:
        return _compat_pickle.NAME_MAPPING[(module, name)]
    return _compat_pickle.IMPORT_MAPPING.get(module, module), name


class Recorder(pickle.Unpickler):
    """The C unpickler with its two hooks into the program replaced by recorders."""

    def __init__(self, file, globals_seen, persistent_seen):
        super().__init__(file)
        self.globals_seen = globals_seen
        self.persistent_seen = persistent_seen

    def find_class(self, module, name):
        self.globals_seen.append([module, name])
        return _stand_in(f"{module}.{name}")

    def persistent_load(self, pid):
        self.persistent_seen.append(repr(pid)[:200])
        return _Inert()


def run_streams(data, limit=64, peeking=False):
    """Every pickle stream in `data`, back to back, as repeated `pickle.load` calls run them:
    from `io.BytesIO` (how torch.load reads a zip's pickle), or, `peeking`, from a buffered
    file (how torch.load reads a file it opens), which the C unpickler reads differently when
    frames disagree with the opcodes."""
    streams = []
    f = io.BufferedReader(io.BytesIO(data)) if peeking else io.BytesIO(data)
    while f.tell() < len(data) and len(streams) < limit:
        start = f.tell()
        globals_seen, persistent_seen = [], []
        entry = {"offset": start, "globals": globals_seen, "persistent_ids": persistent_seen}
        streams.append(entry)
        try:
            Recorder(f, globals_seen, persistent_seen).load()
        except Exception as e:  # noqa: BLE001 - the C unpickler raises many kinds
            entry["error"] = f"{type(e).__name__}: {e}"[:300]
            break
        entry["end"] = f.tell()
    return streams


def torch_format(path):
    """torch.load's choice (torch 2.9.1 serialization.py): `_is_zipfile` looks at the first
    four bytes only; otherwise `_legacy_load` tries tarfile, then unpickles."""
    with open(path, "rb") as f:
        head = f.read(4)
    if head == b"PK\x03\x04":
        return "zip"
    try:
        with tarfile.open(path, mode="r:", format=tarfile.PAX_FORMAT):
            return "tar"
    except Exception:  # noqa: BLE001 - tarfile raises more than TarError on junk
        return "pickle"


def _zip_pickles(path):
    """The pickle members torch's archive reader would hand to the unpickler: `*/data.pkl`
    (torch.save), `*/constants.pkl` (TorchScript). Names as the zipfile module lists them."""
    out = {}
    try:
        with zipfile.ZipFile(path) as z:
            for info in z.infolist():
                parts = info.filename.split("/")
                if len(parts) == 2 and parts[1].lower() in ("data.pkl", "constants.pkl"):
                    out[info.filename] = z.read(info)
    except Exception as e:  # noqa: BLE001
        out["<error>"] = f"{type(e).__name__}: {e}".encode()
    return out


def applies(path):
    return os.path.isfile(path)


def record(path):
    kind = torch_format(path)
    rec = {"torch_format": kind, "members": {}}
    if kind == "pickle":
        with open(path, "rb") as f:
            data = f.read()
        rec["members"]["<pickle>"] = run_streams(data)
        rec["members"]["<pickle, from a file>"] = run_streams(data, peeking=True)
    elif kind == "zip":
        for member, data in _zip_pickles(path).items():
            if member == "<error>":
                rec["zip_error"] = data.decode()
                continue
            rec["members"][member] = run_streams(data, limit=1)
        # torch.load hands an archive with constants.pkl to torch.jit.load, which resolves
        # `__torch__.*` classes from the archive's own compiled code, not by import.
        rec["torchscript"] = any(m.endswith("/constants.pkl") for m in rec["members"])
    elif kind == "tar":
        try:
            with tarfile.open(path, mode="r:") as t:
                for m in t.getmembers():
                    if m.isfile() and m.name in ("sys_info", "pickle", "storages", "tensors"):
                        data = t.extractfile(m).read()
                        rec["members"][m.name] = run_streams(data, limit=1 if m.name != "storages" else 64)
        except Exception as e:  # noqa: BLE001
            rec["tar_error"] = f"{type(e).__name__}: {e}"
    return rec


def resolved(rec):
    """Every (module, name) the C unpickler resolved, mapped as the default find_class maps."""
    out = []
    for streams in rec["members"].values():
        for s in streams:
            out.extend(tuple(g) for g in s["globals"])
    return out


# What torch.jit.load's own unpickler (`Unpickler::readGlobal`) builds itself from
# `torch.jit._pickle`, never importing it: list type tags and tensor ids.
JIT_PICKLE = {"build_intlist", "build_tensorlist", "build_doublelist", "build_boollist",
              "build_tensor_from_id", "restore_type_tag"}


def divergences(rec, inspect_json, audit_json, allowed):
    """Globals the C unpickler resolves outside `allowed` (torch's weights-only table) that
    the audit names in no TP501 finding; plus a pass on a file whose pickle torch would run
    with such a global."""
    named = reported_globals(audit_json)
    out = []
    for module, name in resolved(rec):
        if rec.get("torchscript") and (
                module.startswith("__torch__") or (module == "torch.jit._pickle" and name in JIT_PICKLE)):
            continue
        full = f"{module}.{name}"
        alt = ".".join(mapped(module, name))
        if full in allowed or alt in allowed:
            continue
        if bounded(full) not in named and bounded(alt) not in named:
            out.append(f"C unpickler resolves {bounded(full)}; the audit names no such global")
    return out


def bounded(name):
    """A name as tensorplay's reports show it (`text::bounded_name`): past 256 characters, its
    first 160 and last 64 around an ellipsis, then the low 32 bits of its FNV-1a hash."""
    if len(name) <= 256:
        return name
    h = 0xCBF29CE484222325
    for b in name.encode():
        h = ((h ^ b) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return f"{name[:160]}…{name[-64:]} #{h & 0xFFFFFFFF:08x}"


def reported_globals(audit_json):
    """The dotted globals TP501 findings name (`... references module.name: ...`)."""
    names = set()
    for f in iter_findings(audit_json):
        if f.get("code") == "TP501":
            _, _, rest = f.get("message", "").partition(" references ")
            names.add(rest.split(":", 1)[0].strip())
    return names


def iter_findings(audit_json):
    if not isinstance(audit_json, dict):
        return
    for f in audit_json.get("files", []) or []:
        yield from f.get("findings", []) or []


# ---- structure-aware variants ----

# A call of a harmless-looking but unsafe global, in each protocol's spelling. Nothing runs
# it: the recorder returns stand-ins and tensorplay never imports.
CALLS = [
    b"cos\nsystem\n(S'true'\ntR",  # protocol 0: GLOBAL, MARK, STRING, TUPLE, REDUCE
    b"\x8c\x02os\x8c\x06system\x93\x8c\x04true\x85R",  # protocol 4: STACK_GLOBAL
    b"(S'true'\nios\nsystem\n",  # INST
    b"\x80\x02cposix\nsystem\nX\x04\x00\x00\x00true\x85R",  # protocol 2 with PROTO
]

# Opcodes the C unpickler rejects once reached, after everything before them has run.
FAILURES = [
    b"\xff",  # unknown opcode
    b"h\xfe",  # BINGET of a key never stored
    b"0.",  # POP the call's value, then STOP on an empty stack
    b"0\n\n.",  # trailing text
    b"",  # the stream just ends
    b"\x80\x06",  # PROTO above 5
]


def _boundaries(data):
    """Opcode starts of the first stream (pickletools only decodes, never runs)."""
    import pickletools

    out = []
    try:
        for _op, _arg, pos in pickletools.genops(data):
            out.append(pos)
    except Exception:  # noqa: BLE001 - a broken stream still has the boundaries before it
        pass
    return out or [0]


def _reframe(data, rng):
    """Protocol 4 framing with FRAME lengths that agree, fall short or run over."""
    cut = rng.randrange(0, max(1, len(data)))
    body = data[2:] if data[:1] == b"\x80" else data
    length = len(body) + rng.choice([0, -1, 1, -cut, 7, 1 << 20])
    length = max(0, length)
    return b"\x80\x04\x95" + length.to_bytes(8, "little") + body


def _safetensors_polyglot(call):
    """Valid safetensors and a pickle at once: the length's low byte is UNICODE ('V'), which
    runs to the first newline, the JSON header's last whitespace; the pickle's call is the
    bytes of a U8 tensor the header declares."""
    tail = b"0" + call + b"."
    json_text = b'{"x":{"dtype":"U8","shape":[%d],"data_offsets":[0,%d]}}' % (len(tail), len(tail))
    length = 0x56 | (len(json_text) + 1 << 8)
    header = json_text + b" " * (length - len(json_text) - 1) + b"\n"
    return length.to_bytes(8, "little") + header + tail


def mutations(path, rng):
    with open(path, "rb") as f:
        data = f.read(1 << 20)
    if torch_format(path) != "pickle":
        data = b"\x80\x02}q\x00."
    cuts = _boundaries(data)
    for i, call in enumerate(CALLS):
        for j, fail in enumerate(FAILURES):
            yield f"call {i} then failure {j}", call + fail
        at = rng.choice(cuts)
        yield f"call {i} inside the stream at {at}", data[:at] + call + b"0" + data[at:]
        yield f"call {i} after the stream", data + call + b"."
        yield f"safetensors polyglot {i}", _safetensors_polyglot(call)
    for k in range(3):
        yield f"reframed {k}", _reframe(CALLS[1] + b".", rng)
        framed = _reframe(data, rng)
        yield f"reframed input {k}", framed
