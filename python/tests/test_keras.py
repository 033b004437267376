"""The Keras oracle: Keras 3 itself (`KERAS_BACKEND=torch`, pinned in
fixtures/requirements-keras.txt) loading every `.keras` fixture with
`keras.saving.load_model(path, safe_mode=True)`. Every file it refuses must fail the gate,
every plain `.keras` model it loads must pass (a legacy `.h5` file fails closed, unread), and
Keras must still do what `truth.json` recorded when the fixtures were written. Models Keras writes now, of many layer kinds, must pass too.

Loading a hostile fixture in safe mode is the oracle: Keras refuses before it runs anything, and
the fixtures are harmless besides (an identity lambda, `os.getcwd`, `collections.OrderedDict`).

Keras needs torch here: without torch (the suite's first run) the module is skipped, as the
live tests are; with torch, a missing Keras is an error, never a skip.
"""

import json
import os

import pytest

pytest.importorskip("torch")
os.environ["KERAS_BACKEND"] = "torch"
import keras  # noqa: E402
import numpy as np  # noqa: E402

from conftest import FIXTURES, command_report  # noqa: E402

DIR = FIXTURES / "keras"
TRUTH = json.loads((DIR / "truth.json").read_text())
FILES = sorted(TRUTH["files"])


def safe_load(path):
    """What Keras' safe-mode load does: None when it loads, else the exception's type."""
    try:
        keras.saving.load_model(path, safe_mode=True)
        return None
    except Exception as e:  # noqa: BLE001: the type is the verdict
        return type(e).__name__


def errors_of(report):
    """path -> the codes of its error findings, and every file's format."""
    out = {}
    for file in report["files"]:
        assert file["format"] == ("hdf5" if file["path"].endswith(".h5") else "keras"), file["path"]
        out[file["path"]] = {f["code"] for f in file["findings"] if f["severity"] == "error"}
    return out


@pytest.fixture(scope="module")
def gate(tmp_path_factory):
    report, _ = command_report(tmp_path_factory.mktemp("gate"), DIR)
    return {os.path.basename(p): codes for p, codes in errors_of(report).items()}


def test_the_pinned_keras_is_the_one_the_fixtures_were_written_with():
    assert keras.__version__ == TRUTH["keras"]
    assert keras.backend.backend() == "torch"


@pytest.mark.parametrize("name", FILES)
def test_keras_and_the_gate_agree(name, gate):
    case = TRUTH["files"][name]
    refused = safe_load(DIR / name)
    recorded = case["safe_mode"]
    # Keras still does what it did when the fixtures were written.
    assert (refused is None) == recorded["loaded"], (name, refused)
    if refused is not None:
        assert refused == recorded["error"], name
    errors = gate[name]
    if name.endswith(".h5"):
        # tensorplay reads no HDF5: a legacy file fails closed, whatever Keras does with it.
        assert errors == {"TP716"}, name
        return
    if refused is None:
        assert not errors, f"Keras loads {name}; the gate failed it: {errors}"
    else:
        assert errors, f"Keras refuses {name} ({refused}); the gate passed it"
    assert errors == set(case["rules"]), name


def plain_models():
    """Models of many kinds, as a team writes them: each Keras loads, and each must pass."""
    keras.utils.set_random_seed(0)
    conv = keras.Sequential(
        [
            keras.Input((8, 8, 1)),
            keras.layers.Conv2D(2, 3, activation="relu", padding="same"),
            keras.layers.BatchNormalization(),
            keras.layers.MaxPooling2D(),
            keras.layers.Dropout(0.1),
            keras.layers.Flatten(),
            keras.layers.Dense(3, activation="softmax", kernel_constraint=keras.constraints.MaxNorm(2)),
        ]
    )
    conv.compile(
        optimizer=keras.optimizers.SGD(
            learning_rate=keras.optimizers.schedules.ExponentialDecay(0.1, 10, 0.9)
        ),
        loss="sparse_categorical_crossentropy",
        metrics=["accuracy"],
    )
    tokens = keras.Input((5,), dtype="int32")
    x = keras.layers.Embedding(10, 4)(tokens)
    x = keras.layers.LSTM(3, return_sequences=True)(x)
    x = keras.layers.LayerNormalization()(x)
    x = keras.layers.MultiHeadAttention(num_heads=1, key_dim=2)(x, x)
    x = keras.layers.GlobalAveragePooling1D()(x)
    out = keras.layers.Dense(1, activation=keras.activations.sigmoid)(x)
    seq = keras.Model(tokens, out)
    seq.compile(optimizer="adamw", loss=keras.losses.BinaryCrossentropy(), metrics=[keras.metrics.AUC()])
    return {"conv": (conv, (2, 8, 8, 1), "float32"), "seq": (seq, (2, 5), "int32")}


def test_plain_models_keras_writes_now_pass(tmp_path):
    models = plain_models()
    for name, (model, shape, dtype) in models.items():
        model.predict(np.zeros(shape, dtype), verbose=0)
        path = tmp_path / f"{name}.keras"
        model.save(path)
        assert safe_load(path) is None, name
    report, code = command_report(tmp_path, tmp_path)
    errors = errors_of(report)
    assert len(errors) == len(models)
    assert all(not codes for codes in errors.values()), errors
    assert code == 0
