"""safe_load against the real loaders: every fixture torch.load(weights_only=True) loads gives
torch's tensors (names, dtypes, layouts, devices, parameters, shared storages, bytes), every
safetensors fixture gives safetensors' own; every fixture torch refuses, and every one whose
audit fails, is refused, and nothing a file names is ever called."""

import builtins
import hashlib
import json
import os
import re
import subprocess

import pytest
import tensorplay

torch = pytest.importorskip("torch")

from conftest import FIXTURES, ROOT

# torch.load(weights_only=True)'s verdict on every fixture, recorded by torch itself
# (fixtures/hostile/make_weights_only.py).
VERDICTS = json.loads((FIXTURES / "weights_only.json").read_text())
LOADS = sorted(path for path, verdict in VERDICTS.items() if verdict["loads"])
TORCH_REFUSES = sorted(path for path, verdict in VERDICTS.items() if not verdict["loads"])
# Files whose reading takes long in a debug build; the wheel's release build reads them in
# well under a second, so the suite runs them all where it matters (scripts/check-python.sh).
SLOW = ("budget/", "fuzz/long_names", "fuzz/tied_views")

# What safe_load declines to build from files torch.load reads, each for its documented reason.
DECLINED = re.compile(
    r"builds dense \(strided\) tensors only|ambiguous archive|ambiguous format|weight_map: "
)


def _flatten(obj, prefix=""):
    """Tensors as tensorplay names them: nested dicts, lists and tuples joined by dots."""
    if isinstance(obj, torch.Tensor):
        return [(prefix or "<root>", obj)]
    if isinstance(obj, dict):
        items = obj.items()
    elif isinstance(obj, (list, tuple)):
        items = enumerate(obj)
    else:
        return []
    out = []
    for key, value in items:
        out.extend(_flatten(value, f"{prefix}.{key}" if prefix else str(key)))
    return out


def _sharing(tensors):
    """Which names share a storage, as sorted groups."""
    groups = {}
    for name, tensor in tensors.items():
        key = id(tensor) if tensor.device.type == "meta" else tensor.untyped_storage()._cdata
        groups.setdefault(key, []).append(name)
    return sorted(sorted(group) for group in groups.values())


def _storage_bytes(tensor):
    storage = tensor.untyped_storage()
    return torch.empty(0, dtype=torch.uint8).set_(storage, 0, (storage.nbytes(),), (1,))


def assert_same(ours, theirs):
    assert list(ours) == list(theirs)
    for name, expected in theirs.items():
        got = ours[name]
        where = f"{name}: "
        assert type(got) is type(expected), where + "type"
        assert got.dtype == expected.dtype, where + "dtype"
        assert got.shape == expected.shape, where + "shape"
        assert got.stride() == expected.stride(), where + "stride"
        assert got.storage_offset() == expected.storage_offset(), where + "offset"
        assert got.device == expected.device, where + "device"
        assert got.requires_grad == expected.requires_grad, where + "requires_grad"
        assert (got.is_conj(), got.is_neg()) == (expected.is_conj(), expected.is_neg()), where
        if expected.device.type != "meta":
            # Bytes, not values: NaN payloads and padding count too.
            assert torch.equal(_storage_bytes(got), _storage_bytes(expected)), where + "bytes"
    assert _sharing(ours) == _sharing(theirs)


def _skip_slow(path):
    if any(part in path for part in SLOW) and not os.environ.get("TENSORPLAY_SLOW_FIXTURES"):
        pytest.skip("slow in a debug build; TENSORPLAY_SLOW_FIXTURES=1 runs it")


# Files saved from GPUs: torch.load and safe_load alike need a map_location without one.
MAP_LOCATION = None if torch.cuda.is_available() else "cpu"


def _torch_reading(path):
    """torch's tensors of a fixture torch.load reads: the file's, or a sharded index's shards'
    in the index's order of names."""
    if path.endswith(".index.json"):
        index = json.loads((ROOT / path).read_text())["weight_map"]
        shards = {}
        for shard in dict.fromkeys(index.values()):
            loaded = torch.load(
                (ROOT / path).parent / shard, weights_only=True, map_location=MAP_LOCATION
            )
            shards.update(_flatten(loaded))
        return {name: shards[name] for name in sorted(shards)}
    loaded = torch.load(ROOT / path, weights_only=True, map_location=MAP_LOCATION)
    return dict(_flatten(loaded))


def _refused_for_a_reason(path, err):
    """A file torch loads that safe_load refused: a kind it does not build, a dtype only a
    newer torch has (`fixtures/torch215/`, loaded by torch 2.15), or a file the audit itself
    fails (unreadable or ambiguous to tensorplay: fail closed)."""
    if DECLINED.search(str(err)):
        return True
    newer = re.search(r"has dtype (\w+), which this torch does not have", str(err))
    if newer:
        return not hasattr(torch, newer.group(1))
    return not tensorplay.audit_file(ROOT / path, fail_on="error").passed


@pytest.mark.parametrize("path", LOADS)
def test_what_torch_loads_is_loaded_as_torch_loads_it(path):
    _skip_slow(path)
    try:
        ours = tensorplay.safe_load(ROOT / path, map_location=MAP_LOCATION, fail_on="never")
    except tensorplay.ReadError as err:
        assert _refused_for_a_reason(path, err), str(err)
        return
    theirs = _torch_reading(path)
    if path.endswith(".index.json"):
        ours = {name: ours[name] for name in sorted(ours)}
    assert_same(ours, theirs)


def test_the_ordinary_pytorch_fixtures_are_all_built():
    """None of the plain torch.save fixtures falls back on a documented refusal."""
    declined = []
    for path in sorted((FIXTURES / "pytorch").glob("*.pt")) + sorted(
        (FIXTURES / "models").glob("*.pt")
    ):
        relative = str(path.relative_to(ROOT))
        if not VERDICTS.get(relative, {}).get("loads"):
            continue
        try:
            tensorplay.safe_load(path, map_location="cpu", fail_on="never")
        except tensorplay.ReadError as err:
            declined.append(f"{relative}: {err}")
    # Quantized tensors carry a scale and zero point the reading does not rebuild.
    assert [d for d in declined if "quantized" not in d] == []


@pytest.mark.parametrize(
    "path", sorted((FIXTURES / "safetensors").glob("*.safetensors")), ids=lambda p: p.name
)
def test_safetensors_files_are_loaded_as_safetensors_loads_them(path):
    safetensors_torch = pytest.importorskip("safetensors.torch")
    try:
        theirs = safetensors_torch.load_file(str(path))
    except Exception as err:  # what safetensors cannot build, safe_load refuses too
        with pytest.raises(tensorplay.ReadError):
            tensorplay.safe_load(path, fail_on="never")
        return
    assert_same(tensorplay.safe_load(path, fail_on="never"), theirs)


@pytest.fixture
def nothing_runs(monkeypatch):
    """Every way a payload could run code, made to fail the test if reached."""
    calls = []

    def forbidden(name):
        def call(*args, **kwargs):
            calls.append(name)
            raise AssertionError(f"{name} was called")

        return call

    for module, name in (
        (os, "system"),
        (os, "popen"),
        (subprocess, "Popen"),
        (builtins, "exec"),
        (builtins, "eval"),
        (torch, "load"),
    ):
        monkeypatch.setattr(module, name, forbidden(f"{module.__name__}.{name}"))
    import pickle

    monkeypatch.setattr(pickle, "loads", forbidden("pickle.loads"))
    monkeypatch.setattr(pickle, "load", forbidden("pickle.load"))
    monkeypatch.setattr(pickle, "Unpickler", forbidden("pickle.Unpickler"))
    yield calls
    assert calls == []


def _truth(path):
    """The fixture's truth file: torch's own reading, recorded when it was made."""
    truth = ROOT / f"{path}.truth.json"
    return json.loads(truth.read_text()) if truth.exists() else None


@pytest.mark.parametrize("path", TORCH_REFUSES)
def test_what_torch_refuses_is_refused_or_only_its_opcodes_were(path, nothing_runs):
    """torch.load(weights_only=True) refuses these. safe_load refuses them too, except a
    file whose only fault to torch is its pickle's opcodes (protocol 4's FRAME, a POP: TP505,
    no global outside the allowlist): tensorplay reads those opcodes as CPython does, and
    the tensors are torch's own reading of the file, as its truth file recorded it."""
    _skip_slow(path)
    try:
        tensors = tensorplay.safe_load(ROOT / path, map_location="cpu")
    except (tensorplay.UnsafeCheckpointError, tensorplay.ReadError):
        return
    report = tensorplay.audit_file(ROOT / path)
    if report.data["files"][0]["format"] in ("safetensors", "safetensors-index"):
        return  # not torch.load's to read
    assert "TP505" in report.codes, f"{path} was loaded ({report.codes})"
    assert not {"TP501", "TP504"} & set(report.codes)
    truth = _truth(path)
    if truth is None:
        return
    storages = truth["inspect"]["storages"]
    recorded = {t["name"]: t for t in truth["inspect"]["tensors"]}
    assert list(tensors) == list(recorded)
    for name, tensor in tensors.items():
        want = recorded[name]
        assert str(tensor.dtype) == f"torch.{want['dtype']}"
        assert list(tensor.shape) == want["shape"] and list(tensor.stride()) == want["strides"]
        assert tensor.storage_offset() == want["storage_offset"]
        key = storages[want["storage"]]["key"]
        digest = hashlib.sha256(bytes(_storage_bytes(tensor).numpy())).hexdigest()
        assert digest == truth["storage_sha256"][key], name


def test_an_unsafe_checkpoint_is_refused_with_its_report(nothing_runs):
    path = FIXTURES / "pytorch" / "payload_os_system.pt"
    with pytest.raises(tensorplay.UnsafeCheckpointError) as refused:
        tensorplay.safe_load(path)
    report = refused.value.report
    assert not report.passed and "TP501" in report.codes
    assert "TP501" in str(refused.value)
    # Ignoring the finding still builds only what tensorplay read: nothing named runs.
    tensors = tensorplay.safe_load(path, ignore="TP501")
    assert all(isinstance(t, torch.Tensor) for t in tensors.values())


def test_a_failing_audit_refuses_and_its_options_decide():
    path = FIXTURES / "pytorch" / "overlapping_params.pt"
    with pytest.raises(tensorplay.UnsafeCheckpointError) as refused:
        tensorplay.safe_load(path)
    assert "TP101" in refused.value.report.codes
    tensors = tensorplay.safe_load(path, ignore=["TP101", "TP102"])
    assert len(_sharing(tensors)) < len(tensors)


def test_formats_with_loaders_of_their_own_are_refused():
    for path in (
        FIXTURES / "pytorch" / "torchscript.pt",
        next((FIXTURES / "pt2").glob("*.pt2")),
        next((FIXTURES / "dcp").iterdir()),
    ):
        with pytest.raises(tensorplay.ReadError, match="safe_load builds tensors from"):
            tensorplay.safe_load(path, fail_on="never")


def test_map_location_moves_every_storage_and_keeps_sharing():
    path = FIXTURES / "pytorch" / "tied_weights.pt"
    tensors = tensorplay.safe_load(path, map_location="meta")
    assert {t.device.type for t in tensors.values()} == {"meta"}
    on_cpu = tensorplay.safe_load(path, map_location={"cpu": "cpu"})
    assert len(_sharing(on_cpu)) == 1
    # Saved on cuda:1 with no GPU here, as torch.load fails: a ReadError naming the storage.
    if not torch.cuda.is_available():
        with pytest.raises(tensorplay.ReadError, match="saved on cuda"):
            tensorplay.safe_load(FIXTURES / "pytorch" / "multi_gpu.pt", fail_on="never")
    with pytest.raises(TypeError, match="map_location"):
        tensorplay.safe_load(path, map_location=3)


def test_safe_load_state_dict_loads_strictly_into_a_model():
    model = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.ReLU(), torch.nn.Linear(3, 2))
    path = FIXTURES / "pytorch" / "training_checkpoint.pt"
    report = tensorplay.safe_load_state_dict(model, path, prefix="model")
    assert isinstance(report, tensorplay.Report)
    expected = torch.load(path, weights_only=True)["model"]
    for name, value in model.state_dict().items():
        assert torch.equal(value, expected[name]), name
    # Strict: another model's keys do not load.
    other = torch.nn.Sequential(torch.nn.Linear(4, 3))
    with pytest.raises(RuntimeError, match="Unexpected key"):
        tensorplay.safe_load_state_dict(other, path, prefix="model")
    with pytest.raises(tensorplay.ReadError, match="no tensor under 'nothing'"):
        tensorplay.safe_load_state_dict(model, path, prefix="nothing")
    with pytest.raises(TypeError, match="torch.nn.Module"):
        tensorplay.safe_load_state_dict({"a": 1}, path)
