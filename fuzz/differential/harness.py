"""Differential harness: tensorplay's reading against what the real loaders would do.

For every input (a file, or a torch.distributed.checkpoint directory) each oracle module that
applies records what the real loader would resolve, read or evaluate -- recorded, never run --
and lists the divergences from tensorplay's `inspect --format json` and `audit --format json`.
With --mutate, each input's structure-aware variants (every oracle's `mutations`) are checked
too, each also placed alone under an extension-less name in a directory, as discovery meets it.

    .venv-fixtures/bin/python fuzz/differential/harness.py fixtures/           # every fixture
    .venv-fixtures/bin/python fuzz/differential/harness.py --mutate --seconds 3600 fixtures/
    .venv-fixtures/bin/python fuzz/differential/harness.py --mutate --variants 300 fixtures/  # CI

Exit status: 0 when nothing diverged, 1 when something did (each written under --out with
its oracle record), 2 on a usage error. Where tensorplay only refuses what a loader reads
(stricter, never a way past the gate) the input is printed as STRICTER and saved too, but
does not fail the run. See fuzz/README.md.
"""

import argparse
import hashlib
import importlib
import inspect as pyinspect
import json
import logging
import os
import random
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
ORACLES = ["oracle_pickle", "oracle_script_pt2", "oracle_dcp", "oracle_weights_only", "oracle_accept"]
# The oracles asked again about a variant met in a directory walk: what a loader runs must be
# audited there too, whatever the file's name (a bare one here).
IN_DIRECTORY = ("pickle", "accept")


def load_oracles():
    sys.path.insert(0, str(HERE))
    mods = []
    for name in ORACLES:
        try:
            mods.append(importlib.import_module(name))
        except ModuleNotFoundError as e:
            if e.name != name:
                raise
    return mods


# Names a newer torch than the pinned one adds to its weights-only table (torch 2.15.0:
# `torch.bcomplex32`), or registers as safe globals when imported (torch 2.15.0's device mesh
# layouts), which tensorplay's table holds too (fixtures/torch215/).
NEWER_TORCH_ALLOWED = {
    "torch.bcomplex32",
    "torch.distributed._mesh_layout._FlatLayout",
    "torch.distributed._mesh_layout._MeshLayout",
}


def weights_only_allowlist():
    """torch's own weights-only table, as `module.name` strings, with the names a newer torch
    adds; empty without torch."""
    try:
        from torch import _weights_only_unpickler as wo
    except ImportError:
        return set()
    allowed = set(wo._get_allowed_globals().keys())
    allowed.update(wo._get_user_allowed_globals().keys())
    return allowed | NEWER_TORCH_ALLOWED


def flexible(fn, *args):
    """Calls an oracle hook with as many of `args` as it takes (the allowlist and the random
    source are optional parameters)."""
    n = len(pyinspect.signature(fn).parameters)
    return fn(*args[:n])


class Tensorplay:
    def __init__(self, binary, timeout):
        self.binary = binary
        self.timeout = timeout

    def _json(self, args):
        try:
            out = subprocess.run(
                [self.binary, *args], capture_output=True, timeout=self.timeout, check=False
            )
        except subprocess.TimeoutExpired:
            return {"_timeout": True}, None
        try:
            return json.loads(out.stdout), out.returncode
        except ValueError:
            return {"_stderr": out.stderr.decode(errors="replace")[:500]}, out.returncode

    def inspect(self, path):
        return self._json(["inspect", "--format", "json", str(path)])

    def audit(self, path):
        return self._json(
            ["audit", "--format", "json", "--fail-on", "never", "--metadata-only", str(path)]
        )


def inputs(paths):
    """Files, and DCP directories as one input; a DCP directory's own files are not inputs."""
    for root in paths:
        root = Path(root)
        if root.is_file():
            yield root
            continue
        for dirpath, dirnames, filenames in os.walk(root):
            d = Path(dirpath)
            if (d / ".metadata").is_file():
                dirnames[:] = []
                yield d
                continue
            dirnames.sort()
            for f in sorted(filenames):
                if not f.endswith((".json", ".md", ".py", ".txt", ".sh")) or f.endswith(".index.json"):
                    yield d / f


def check(path, oracles, tp, allowed):
    """The divergences of one input, with the records that show them."""
    inspect_json, _ = tp.inspect(path)
    audit_json, _ = tp.audit(path)
    found = []
    for oracle in oracles:
        if not oracle.applies(path):
            continue
        try:
            rec = oracle.record(path)
        except Exception as e:  # noqa: BLE001 - an oracle failing is itself worth a look
            found.append({"oracle": oracle.NAME, "divergence": f"oracle failed: {e!r}"})
            continue
        try:
            ds = flexible(oracle.divergences, rec, inspect_json, audit_json, allowed)
        except MemoryError:
            ds = ["the oracle ran out of memory comparing its record"]
        for d in ds:
            found.append({"oracle": oracle.NAME, "divergence": d, "record": rec})
    return found


def in_directory(name, data, tp, oracles, allowed, work):
    """A variant met by discovery: alone in a folder, under an extension-less name."""
    folder = Path(tempfile.mkdtemp(dir=work))
    try:
        target = folder / name
        target.write_bytes(data)
        audit_json, _ = tp.audit(folder)
        found = []
        for oracle in oracles:
            if oracle.NAME not in IN_DIRECTORY:
                continue
            rec = oracle.record(target)
            for d in flexible(oracle.divergences, rec, None, audit_json, allowed):
                found.append({"oracle": f"{oracle.NAME}-in-directory", "divergence": d, "record": rec})
        return found
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def mutants(oracle, path, rng):
    """An oracle's variants of `path`; a mutator that fails is reported and passed by, so one
    odd input does not end a long run."""
    try:
        yield from flexible(oracle.mutations, path, rng)
    except Exception as e:  # noqa: BLE001
        print(f"MUTATOR FAILED {oracle.NAME} on {path}: {e!r}", flush=True)


def summaries(oracles, over):
    for oracle in oracles:
        if hasattr(oracle, "summary"):
            print(f"{oracle.summary()} [{over}]", flush=True)


def write_variant(work, name, payload):
    """A variant on disk under the original's name (names choose loaders)."""
    folder = Path(tempfile.mkdtemp(dir=work))
    if isinstance(payload, dict):
        for rel, data in payload.items():
            (folder / rel).parent.mkdir(parents=True, exist_ok=True)
            (folder / rel).write_bytes(data)
        return folder, folder
    target = folder / name
    target.write_bytes(payload)
    return folder, target


# A divergence that only shows tensorplay refusing what the real loader reads: stricter,
# never a way past the gate. Printed and saved, but not a failure.
STRICTER = "stricter:"


def tally(out, path, label, payload, found, counts):
    """Saves and prints what one input found, counting divergences and stricter refusals."""
    if not found:
        return
    try:
        save(out, path, label, payload, found)
    except MemoryError:
        # An oracle's record of a file built to amplify memory: the divergence still counts.
        print(f"could not save the record of {path} [{label}]: out of memory", flush=True)
    where = path if label == "as is" else f"{path} [{label}]"
    real = [f for f in found if not str(f["divergence"]).startswith(STRICTER)]
    if real:
        counts["diverged"] += 1
        print(f"DIVERGES {where}: {real[0]['divergence']}", flush=True)
    else:
        counts["stricter"] += 1
        print(f"STRICTER {where}: {found[0]['divergence'][len(STRICTER):].strip()}", flush=True)


def save(out, path, label, payload, found):
    out.mkdir(parents=True, exist_ok=True)
    digest = hashlib.sha256(repr((str(path), label)).encode()).hexdigest()[:12]
    base = out / f"{Path(path).name}.{digest}"
    if isinstance(payload, dict):
        base.mkdir(exist_ok=True)
        for rel, data in payload.items():
            (base / rel).parent.mkdir(parents=True, exist_ok=True)
            (base / rel).write_bytes(data)
    elif payload is not None:
        base.write_bytes(payload)
    record = clipped({"input": str(path), "variant": label, "found": found})
    (out / f"{base.name}.json").write_text(json.dumps(record, indent=1, default=str))


def clipped(value, limit=4096):
    """`value` with long strings and lists cut: a record of a crafted input can name the same
    32 000-byte global a million times."""
    if isinstance(value, str) and len(value) > limit:
        return f"{value[:limit // 2]}… ({len(value)} characters)"
    if isinstance(value, (list, tuple)):
        items = [clipped(v, limit) for v in value[:limit // 4]]
        if len(value) > len(items):
            items.append(f"… and {len(value) - len(items)} more")
        return items
    if isinstance(value, dict):
        return {k: clipped(v, limit) for k, v in value.items()}
    return value


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("paths", nargs="+")
    ap.add_argument("--binary", default=str(REPO / "target" / "debug" / "tensorplay"))
    ap.add_argument("--mutate", action="store_true", help="also check structure-aware variants")
    ap.add_argument("--seconds", type=float, default=0, help="stop mutating after this long")
    ap.add_argument(
        "--variants", type=int, default=0, help="stop after this many variants (a bounded, repeatable run)"
    )
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--timeout", type=float, default=60, help="per tensorplay run")
    ap.add_argument(
        "--max-memory-gib", type=float, default=12, help="address space of the harness and what it runs"
    )
    ap.add_argument("--out", default=str(REPO / "target" / "differential"))
    args = ap.parse_args()

    # The oracles run real loaders in this process, and a crafted file can make one allocate
    # what it claims: bounded, so it fails with MemoryError (reported) instead of taking the
    # machine. Children (tensorplay, the weights-only worker) inherit the bound.
    limit = int(args.max_memory_gib * (1 << 30))
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    # The loaders log what they fall back to (torch.export's older layouts); the harness
    # prints its own verdicts.
    logging.disable(logging.WARNING)
    oracles = load_oracles()
    tp = Tensorplay(args.binary, args.timeout)
    allowed = weights_only_allowlist()
    out = Path(args.out)
    rng = random.Random(args.seed)
    started = time.monotonic()
    checked = 0
    counts = {"diverged": 0, "stricter": 0}
    all_inputs = list(inputs(args.paths))
    with tempfile.TemporaryDirectory() as work:
        for path in all_inputs:
            found = check(path, oracles, tp, allowed)
            checked += 1
            tally(out, path, "as is", None, found, counts)
        summaries(oracles, "inputs as they are")
        rounds = variants = 0
        mutated = args.mutate
        while args.mutate:
            rounds += 1
            order = all_inputs[:]
            rng.shuffle(order)
            for path in order:
                for oracle in oracles:
                    if not oracle.applies(path) or not hasattr(oracle, "mutations"):
                        continue
                    for label, payload in mutants(oracle, path, rng):
                        folder, target = write_variant(work, Path(path).name, payload)
                        found = check(target, oracles, tp, allowed)
                        if not isinstance(payload, dict) and oracle.NAME in IN_DIRECTORY:
                            found += in_directory("pytorch_model", payload, tp, oracles, allowed, work)
                        shutil.rmtree(folder, ignore_errors=True)
                        checked += 1
                        tally(out, path, label, payload, found, counts)
                        variants += 1
                        timed_out = args.seconds and time.monotonic() - started > args.seconds
                        if timed_out or (args.variants and variants >= args.variants):
                            args.mutate = False
                            break
                    if not args.mutate:
                        break
                if not args.mutate:
                    break
            if not args.seconds and not args.variants:
                break
    elapsed = time.monotonic() - started
    if mutated:
        summaries(oracles, "inputs and variants")
    print(
        f"differential: {checked} inputs checked, {counts['diverged']} diverged, "
        f"{counts['stricter']} only refused where the loader reads, {elapsed:.0f} s"
    )
    return 1 if counts["diverged"] else 0


if __name__ == "__main__":
    sys.exit(main())
