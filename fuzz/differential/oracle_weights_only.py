"""What `torch.load(path)` does by default (`weights_only=True` since torch 2.6): loads or
refuses, and torch's reason.

This oracle is the real loader on its safe path: torch's weights-only unpickler resolves
nothing outside its allowlist and calls only tensor rebuild functions. It still allocates
what a file asks for, so it runs in a worker process of its own with its address space
limited, restarted when a file kills it. `map_location="cpu"`: where a tensor's device is
decides nothing here (device rules judge that), and the check needs no GPU.

tensorplay's verdict is the `weights_only` field of `inspect --format json` (absent where
torch.load is not the file's loader); a file tensorplay cannot read counts as one torch
must refuse too. Every disagreement is a divergence, and `summary()` gives the agreement.
"""

import json
import os
import subprocess
import sys

NAME = "weights-only"

# Formats tensorplay reads as torch.load reads them (`Format::torch_load`).
TORCH_LOAD_FORMATS = {"pytorch-zip", "pytorch-legacy", "torchscript", "pytorch-index", "pickle"}

WORKER = r"""
import json, resource, sys, warnings
limit = int(sys.argv[1])
resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
warnings.filterwarnings("ignore")
import torch
for line in sys.stdin:
    path = line.rstrip("\n")
    try:
        torch.load(path, weights_only=True, map_location="cpu")
        out = {"loads": True}
    except BaseException as e:  # noqa: BLE001 - every refusal is the answer
        # torch wraps the unpickler's message in advice ("Weights only load failed. ...",
        # paragraphs apart, the documentation link last): keep the unpickler's own words.
        msg = str(e)
        if "WeightsUnpickler error: " in msg:
            msg = msg.split("WeightsUnpickler error: ", 1)[1]
        elif msg.startswith("Weights only load failed"):
            paragraphs = [p.strip() for p in msg.split("\n\n") if p.strip()]
            msg = paragraphs[-2] if len(paragraphs) > 2 else paragraphs[-1]
        msg = msg.strip().splitlines()[0] if msg.strip() else ""
        msg = msg.removeprefix("Weights only load failed. ")
        out = {"loads": False, "error": type(e).__name__, "reason": msg[:200]}
    print(json.dumps(out), flush=True)
"""

_worker = None
_tally = {
    "agree": 0,
    "disagree": 0,
    "loads": 0,
    "refuses": 0,
    "unread": 0,
    "stricter": 0,
    "beyond": 0,
}

# The prefix of a divergence that only shows tensorplay refusing what the loader reads.
STRICTER = "stricter:"


def _ask(path):
    global _worker
    for _ in range(2):
        if _worker is None or _worker.poll() is not None:
            _worker = subprocess.Popen(
                [sys.executable, "-c", WORKER, str(8 << 30)],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
                text=True,
            )
        try:
            _worker.stdin.write(os.fspath(path) + "\n")
            _worker.stdin.flush()
            line = _worker.stdout.readline()
        except BrokenPipeError:
            line = ""
        if line:
            return json.loads(line)
        _worker = None
    return {"loads": False, "error": "killed", "reason": "the loader's process died"}


def applies(path):
    return os.path.isfile(path)


def record(path):
    """torch.load's answer; for a sharded index, every shard's (a loader of the index loads
    each with torch.load), the first refusal standing for the set."""
    if str(path).endswith(".index.json"):
        try:
            with open(path, encoding="utf-8") as f:
                shards = sorted(set(json.load(f)["weight_map"].values()))
        except Exception as e:  # noqa: BLE001
            return {"loads": False, "error": type(e).__name__, "reason": str(e)[:300]}
        for shard in shards:
            rec = _ask(os.path.join(os.path.dirname(path), shard))
            if not rec["loads"]:
                return dict(rec, shard=shard)
        return {"loads": True}
    return _ask(path)


def tensorplay_verdict(inspect_json):
    """`True`/`False` for loads/refuses, `None` where torch.load is not the file's loader,
    `"unread"` where tensorplay could not read the file."""
    if not isinstance(inspect_json, dict) or "format" not in inspect_json:
        return "unread"
    if inspect_json["format"] not in TORCH_LOAD_FORMATS:
        return None
    verdict = inspect_json.get("weights_only")
    return None if verdict is None else bool(verdict.get("loads"))


def divergences(rec, inspect_json, audit_json, allowed=frozenset()):
    mine = tensorplay_verdict(inspect_json)
    if mine is None:
        return []
    if not rec["loads"] and _only_newer_names(rec, allowed):
        # The pinned torch stopped at a name only a newer torch has: what that torch does
        # past it (a variant's BUILD on a dict, say) the pinned one never says. No verdict;
        # the fixture itself is held to the newer torch's truth file by the Rust tests.
        _tally["beyond"] += 1
        return []
    torch_loads = rec["loads"]
    if mine == "unread":
        _tally["unread"] += 1
        agree = not torch_loads
    else:
        _tally["loads" if mine else "refuses"] += 1
        agree = mine == torch_loads
    if agree:
        _tally["agree"] += 1
        return []
    if mine != "unread":
        _tally["disagree"] += 1
    if mine == "unread":
        # Refusing what torch accepts is tensorplay being stricter, never a way past the
        # gate: reported apart (the harness does not fail on it), and listed in fuzz/README.md.
        _tally["stricter"] += 1
        return [f"{STRICTER} torch.load(weights_only=True) loads a file tensorplay refuses"]
    if torch_loads:
        why = inspect_json["weights_only"].get("reason")
        return [f"torch.load(weights_only=True) loads it; tensorplay says it refuses: {why}"]
    return [
        f"torch.load(weights_only=True) refuses it ({rec['error']}: {rec['reason']}); "
        "tensorplay says it loads"
    ]


def _only_newer_names(rec, allowed):
    """Whether the pinned torch refused at a global that a newer torch allows: `allowed`
    holds both tables, and the pinned torch says "Unsupported global" only of a name outside
    its own, so a refused name found in `allowed` is one only the newer torch has."""
    reason = rec.get("reason") or ""
    prefix = "Unsupported global: GLOBAL "
    if not reason.startswith(prefix):
        return False
    return reason[len(prefix) :].split(" ", 1)[0] in allowed


def summary():
    """Agreement over the files tensorplay reads (a file it cannot read has no verdict: it
    fails the gate as TP502 whatever torch does)."""
    judged = _tally["loads"] + _tally["refuses"]
    agree = judged - _tally["disagree"]
    rate = 100.0 * agree / judged if judged else 100.0
    return (
        f"weights-only verdict: {agree}/{judged} agree with torch.load ({rate:.1f} %) "
        f"[loads {_tally['loads']}, refuses {_tally['refuses']}]; tensorplay refused "
        f"{_tally['unread']} more, {_tally['stricter']} of which torch loads; "
        f"{_tally['beyond']} not judged (the pinned torch stops at a name only a newer one has)"
    )


# Snippets that act on the object a torch.save data.pkl returns (a dict, an OrderedDict, a
# tensor...), placed just before its STOP: each is one way torch's weights-only unpickler and
# CPython's differ, or agree, on what may be built.
_KEY = b"X\x01\x00\x00\x00z"
SNIPPETS = {
    "setitem": _KEY + b"K\x01s",
    "setitems": b"(" + _KEY + b"K\x01u",
    "build-empty": b"}b",
    "build-none": b"Nb",
    "append": b"K\x01a",
    "appends": b"(K\x01e",
    "unhashable-key": b"]K\x01s",
    "odict-newobj": _KEY + b"ccollections\nOrderedDict\n)\x81s",
    "set-reduce": _KEY + b"cbuiltins\nset\n]\x85Rs",
    "py2-set": _KEY + b"c__builtin__\nset\n)Rs",
    "userdict-odict": _KEY + b"cUserDict\nOrderedDict\n)Rs",
    "dtype-call": _KEY + b"ctorch\nfloat32\n)Rs",
    "storage-class-call": _KEY + b"ctorch\nFloatStorage\n)Rs",
    "size": _KEY + b"ctorch\nSize\n(K\x02K\x03t\x85Rs",
    "device": _KEY + b"ctorch\ndevice\nX\x03\x00\x00\x00cpu\x85Rs",
    "namespace": _KEY + b"cargparse\nNamespace\n)\x81s",
    "blocked-global": _KEY + b"cposix\nsystem\ns",
    "short-binunicode": _KEY + b"\x8c\x01ys",
    "short-binbytes": _KEY + b"C\x01ys",
    "short-binstring": _KEY + b"U\x01ys",
    "short-binstring-latin1": _KEY + b"U\x01\xffs",
    "int-line": _KEY + b"I1\ns",
    "long1-big": _KEY + b"\x8a\x09" + bytes(range(1, 10)) + b"s",
    "list-opcode": _KEY + b"(K\x01K\x02ls",
    "tuple": _KEY + b"(K\x01K\x02ts",
    "tuple1": _KEY + b"\x88\x85s",
    "memo-miss": _KEY + b"h\xfes",
    "memoize": _KEY + b"N\x94s",
    "persid-module": _KEY + b"(X\x06\x00\x00\x00moduleK\x01tQs",
    "persid-int": _KEY + b"K\x01Qs",
    "newobj-function": _KEY + b"ctorch._utils\n_rebuild_tensor_v2\n)\x81s",
    "reduce-tuple": _KEY + b"(K\x01t)Rs",
    "empty-set": _KEY + b"\x8fs",
    "frame": b"\x95\x00\x00\x00\x00\x00\x00\x00\x00",
}


def mutations(path, rng):
    """A torch.save archive with each snippet before data.pkl's STOP (protocol 2 only: the
    stream torch writes), in an order `rng` shuffles."""
    import io
    import zipfile

    try:
        with zipfile.ZipFile(path) as z:
            entries = [(i.filename, z.read(i)) for i in z.infolist()]
    except Exception:  # noqa: BLE001 - not an archive zipfile reads: nothing to bend
        return
    pickles = [n for n, d in entries if n.endswith("/data.pkl") and d[:2] == b"\x80\x02"]
    if len(pickles) != 1 or any(n.endswith("/constants.pkl") for n, _ in entries):
        return
    names = list(SNIPPETS)
    rng.shuffle(names)
    for label in names:
        buf = io.BytesIO()
        with zipfile.ZipFile(buf, "w") as z:
            for name, data in entries:
                if name == pickles[0]:
                    end = data.rindex(b".")
                    data = data[:end] + SNIPPETS[label] + data[end:]
                z.writestr(zipfile.ZipInfo(name, date_time=(1980, 1, 1, 0, 0, 0)), data)
        yield f"weights-only:{label}", buf.getvalue()
