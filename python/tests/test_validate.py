"""validate_state_dict_load against real models and the repository's fixtures; torch's own
load_state_dict is the oracle where the fixture is safe to load."""

import pickle

import pytest
import tensorplay

torch = pytest.importorskip("torch")

from conftest import FIXTURES

STATE_DICT = FIXTURES / "pytorch/state_dict.pt"
TRAINING = FIXTURES / "pytorch/training_checkpoint.pt"
HOSTILE = FIXTURES / "pytorch/payload_os_system.pt"


def _mlp(last=2, bias=True):
    """The fixtures' model: Linear(4, 3), ReLU, Linear(3, last)."""
    return torch.nn.Sequential(
        torch.nn.Linear(4, 3), torch.nn.ReLU(), torch.nn.Linear(3, last, bias=bias)
    )


def _torch_load(path):
    # Oracle only, on fixtures that are safe: never in library code.
    return torch.load(path, weights_only=True)


def test_a_matching_model_loads_the_state_dict_file():
    model = _mlp()
    check = tensorplay.validate_state_dict_load(model, STATE_DICT)
    assert check.ok and check.report.passed
    assert (check.missing, check.unexpected, check.mismatched) == ([], [], [])
    assert check.report.files[0]["path"] == str(STATE_DICT)
    assert str(check).endswith(": ok") and check.problems == []
    # torch agrees: the same file loads into the same model.
    assert not model.load_state_dict(_torch_load(STATE_DICT)).missing_keys


def test_a_training_checkpoint_matches_under_its_prefix():
    model = _mlp()
    whole = tensorplay.validate_state_dict_load(model, TRAINING)
    assert not whole.ok
    assert whole.missing == list(model.state_dict())
    assert "model.0.weight" in whole.unexpected and "optimizer.state.0.exp_avg" in whole.unexpected
    under = tensorplay.validate_state_dict_load(model, TRAINING, prefix="model")
    assert under.ok and under.missing == [] and under.unexpected == []
    model.load_state_dict(_torch_load(TRAINING)["model"])  # the oracle loads it too
    # The report is the whole file's, optimizer state included.
    assert under.report.summary["tensors"] == 16


def test_a_missing_key_fails_strict_only_as_torch_does():
    model = torch.nn.Sequential(*_mlp(), torch.nn.Linear(2, 1))
    check = tensorplay.validate_state_dict_load(model, STATE_DICT)
    assert check.missing == ["3.weight", "3.bias"] and check.unexpected == []
    assert not check.ok and "missing: 3.weight, 3.bias" in str(check)
    loose = tensorplay.validate_state_dict_load(model, STATE_DICT, strict=False)
    assert loose.ok and "allowed: strict=False" in str(loose)
    with pytest.raises(RuntimeError, match="Missing key"):
        model.load_state_dict(_torch_load(STATE_DICT))
    assert model.load_state_dict(_torch_load(STATE_DICT), strict=False).missing_keys == (
        check.missing
    )


def test_a_wrong_shape_fails_whatever_strict_is():
    model = _mlp(last=5, bias=False)
    check = tensorplay.validate_state_dict_load(model, STATE_DICT, strict=False)
    assert check.unexpected == ["2.bias"]
    assert check.mismatched == [("2.weight", "shape", (5, 3), (2, 3))]
    assert not check.ok
    assert "2.weight: shape (5, 3) in the model, (2, 3) in the source" in str(check)
    assert "refuses" in str(check)
    with pytest.raises(RuntimeError, match="size mismatch for 2.weight"):
        model.load_state_dict(_torch_load(STATE_DICT), strict=False)


def test_a_wrong_dtype_counts_though_torch_casts_it():
    model = _mlp().double()
    check = tensorplay.validate_state_dict_load(model, STATE_DICT)
    assert {m.field for m in check.mismatched} == {"dtype"}
    assert [m.name for m in check.mismatched] == list(model.state_dict())
    assert check.mismatched[0] == ("0.weight", "dtype", "float64", "float32")
    assert not check.ok and "casts it to float64" in str(check)
    # What the message says torch does: it loads, casting to the model's dtype.
    model.load_state_dict(_torch_load(STATE_DICT))
    assert model[0].weight.dtype == torch.float64


def test_a_live_state_dict_is_compared_and_audited():
    model = _mlp()
    source = dict(model.state_dict())
    del source["2.bias"]
    source["epoch"] = 3  # no tensor, yet a key torch would find unexpected
    check = tensorplay.validate_state_dict_load(model, source)
    assert check.missing == ["2.bias"] and check.unexpected == ["epoch"]
    assert check.report.files[0]["path"] == "<live dict>" and check.report.passed
    with pytest.raises(RuntimeError, match='Unexpected key.*"epoch"'):
        model.load_state_dict(source)
    source = dict(model.state_dict(), **{"0.weight": [[0.0] * 4] * 3})
    typed = tensorplay.validate_state_dict_load(model, source)
    assert typed.mismatched == [("0.weight", "type", "Tensor", "list")] and not typed.ok
    with pytest.raises(RuntimeError, match="expected torch.Tensor"):
        model.load_state_dict(source)
    # The source's own findings count: a NaN is a failed audit, keys and shapes aside.
    poisoned = {k: v.clone() for k, v in model.state_dict().items()}
    poisoned["0.bias"][1] = float("nan")
    nan = tensorplay.validate_state_dict_load(model, poisoned)
    assert nan.missing == nan.unexpected == nan.mismatched == []
    assert nan.report.codes == ["TP401"] and not nan.ok
    assert "the source's audit failed (TP401)" in str(nan)
    assert tensorplay.validate_state_dict_load(model, poisoned, metadata_only=True).ok


def test_meta_on_either_side_counts_other_device_differences_do_not():
    model = _mlp()
    on_meta = {k: v.to("meta") for k, v in model.state_dict().items()}
    from_meta = tensorplay.validate_state_dict_load(model, on_meta)
    assert {(m.field, m.model, m.source) for m in from_meta.mismatched} == {
        ("device", "cpu", "meta")
    }
    assert not from_meta.ok and "no data to copy" in str(from_meta)
    with pytest.raises(RuntimeError):
        model.load_state_dict(on_meta)
    empty = _mlp().to("meta")
    into_meta = tensorplay.validate_state_dict_load(empty, STATE_DICT)
    assert len(into_meta.mismatched) == 4 and not into_meta.ok
    assert "no-op" in str(into_meta)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_a_cuda_model_loads_a_cpu_file():
    model = _mlp().cuda()
    check = tensorplay.validate_state_dict_load(model, STATE_DICT)
    assert {(m.field, m.model, m.source) for m in check.mismatched} == {
        ("device", "cuda:0", "cpu")
    }
    assert check.ok and "copies across devices" in str(check)


def test_buffers_extra_state_and_old_scalars_follow_torch():
    class Stateful(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = torch.nn.Linear(2, 2)
            self.register_buffer("steps", torch.tensor(0))
            self.register_buffer("scratch", torch.zeros(2), persistent=False)

        def get_extra_state(self):
            return {"version": 2}

        def set_extra_state(self, state):
            pass

    model = Stateful()
    source = dict(model.state_dict())
    # torch 0.3 saved scalars as 1-element vectors; torch still loads them into 0-dim ones.
    source["steps"] = torch.tensor([5])
    check = tensorplay.validate_state_dict_load(model, source)
    assert check.ok and check.missing == [] and check.mismatched == []
    model.load_state_dict(source)
    assert int(model.steps) == 5
    del source["_extra_state"]
    assert tensorplay.validate_state_dict_load(model, source).missing == ["_extra_state"]


def test_lazy_parameters_take_any_shape():
    model = torch.nn.Sequential(torch.nn.LazyLinear(3), torch.nn.ReLU(), torch.nn.Linear(3, 2))
    model[0] = torch.nn.LazyLinear(3)
    check = tensorplay.validate_state_dict_load(model, STATE_DICT)
    assert check.ok and check.mismatched == []
    model.load_state_dict(_torch_load(STATE_DICT))
    assert model[0].weight.shape == (3, 4)


def test_a_hostile_file_fails_through_its_report_and_is_never_executed(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("the checkpoint was unpickled or executed")

    for target, name in [
        (torch, "load"),
        (pickle, "load"),
        (pickle, "loads"),
        (pickle, "Unpickler"),
        (__import__("os"), "system"),
    ]:
        monkeypatch.setattr(target, name, refuse)
    model = torch.nn.Module()
    model.register_parameter("weight", torch.nn.Parameter(torch.zeros(2)))
    check = tensorplay.validate_state_dict_load(model, HOSTILE)
    # Keys, shapes and dtypes match: only the file's own findings make it fail.
    assert check.missing == check.unexpected == check.mismatched == []
    assert "TP501" in check.report.codes and not check.ok
    assert "the source's audit failed" in str(check)


def test_wrong_arguments_are_type_errors():
    model = _mlp()
    with pytest.raises(TypeError, match="takes a torch.nn.Module as model, not int"):
        tensorplay.validate_state_dict_load(42, STATE_DICT)
    with pytest.raises(TypeError, match="takes a state_dict .* not list"):
        tensorplay.validate_state_dict_load(model, [STATE_DICT])
    with pytest.raises(TypeError, match="strict='yes'"):
        tensorplay.validate_state_dict_load(model, STATE_DICT, strict="yes")
    with pytest.raises(TypeError, match="prefix=1"):
        tensorplay.validate_state_dict_load(model, STATE_DICT, prefix=1)
    with pytest.raises(TypeError, match=r"validate_state_dict_load\(\) got .*'load_to'"):
        tensorplay.validate_state_dict_load(model, model.state_dict(), load_to="cpu")
    with pytest.raises(tensorplay.ReadError):
        tensorplay.validate_state_dict_load(model, FIXTURES / "pytorch/no-such-file.pt")
