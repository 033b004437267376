"""Every Python code block of docs/python.md and the README runs, so the docs cannot drift from
the package: each block in a fresh namespace, in a directory holding the files it names
(`model.pt`, `ckpt.pt`, `model.safetensors`), with the objects it names (`model`, `x`,
`train_loader`, `build_model`) made small; a block defining a pytest test runs under pytest
with the plugin the wheel registers."""

import re
import subprocess
import sys
import textwrap

import pytest

from conftest import ROOT

torch = pytest.importorskip("torch")

DOCS = ["docs/python.md", "README.md"]

# The objects the examples name: a tiny language model whose head can be tied to its
# embedding (`model.lm_head.weight = model.embed.weight`), an input, and a loader.
SETUP = '''
import torch
import tensorplay


class TinyLM(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = torch.nn.Embedding(10, 4)
        self.lm_head = torch.nn.Linear(4, 10, bias=False)

    def forward(self, x):
        # Token ids from whatever tensor an example passes (the README's `x` is a float view).
        return self.lm_head(self.embed(x.long().abs() % 10))


def build_model():
    torch.manual_seed(0)
    return TinyLM()
'''


def blocks(relative):
    """(line, code) of each ```python block of a document."""
    text = (ROOT / relative).read_text(encoding="utf-8")
    found = []
    for match in re.finditer(r"^```python\n(.*?)^```", text, flags=re.S | re.M):
        line = text.count("\n", 0, match.start()) + 2
        found.append((line, match.group(1)))
    return found


CASES = [(doc, line, code) for doc in DOCS for line, code in blocks(doc)]


def test_the_docs_have_python_blocks():
    # Each document holds examples, and some define pytest tests: nothing is left unrun.
    assert {doc for doc, _, _ in CASES} == set(DOCS)
    assert any("def test_" in code for _, _, code in CASES)


def _files(tmp_path, namespace):
    """The files the examples read, written by torch and the safetensors layout."""
    model = namespace["build_model"]()
    torch.save(model.state_dict(), tmp_path / "model.pt")
    torch.save({"model": model.state_dict(), "optimizer": {}}, tmp_path / "ckpt.pt")
    (tmp_path / "checkpoints").mkdir()
    torch.save(model.state_dict(), tmp_path / "checkpoints" / "model.pt")
    _safetensors(tmp_path / "model.safetensors", model.state_dict())


def _safetensors(path, tensors):
    """A safetensors file as the format lays it out (the package is not needed)."""
    import json
    import struct

    header, data = {}, b""
    for name, t in tensors.items():
        raw = t.detach().contiguous().numpy().tobytes()
        header[name] = {
            "dtype": "F32",
            "shape": list(t.shape),
            "data_offsets": [len(data), len(data) + len(raw)],
        }
        data += raw
    text = json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(text)) + text + data)


@pytest.mark.parametrize(
    "doc,line,code", CASES, ids=[f"{doc}:{line}" for doc, line, _ in CASES]
)
def test_the_block_runs(doc, line, code, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    if "def test_" in code:
        (tmp_path / "conftest.py").write_text(SETUP, encoding="utf-8")
        namespace = {}
        exec(SETUP, namespace)
        _files(tmp_path, namespace)
        (tmp_path / "test_doc.py").write_text(
            "from conftest import build_model\n\n" + code, encoding="utf-8"
        )
        done = subprocess.run(
            [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "test_doc.py"],
            capture_output=True,
            text=True,
            cwd=tmp_path,
        )
        assert done.returncode == 0, f"{doc}:{line}\n{done.stdout}\n{done.stderr}"
        assert " passed" in done.stdout, done.stdout
        return
    namespace = {"__name__": "__docs__"}
    exec(SETUP, namespace)
    _files(tmp_path, namespace)
    namespace["model"] = namespace["build_model"]()
    namespace["x"] = torch.tensor([[1, 2, 3]])
    namespace["train_loader"] = [
        {"input_ids": torch.zeros(2, 8, dtype=torch.long), "mask": torch.ones(2, 8)}
        for _ in range(3)
    ]
    try:
        exec(compile(textwrap.dedent(code), f"{doc}:{line}", "exec"), namespace)
    except Exception as e:  # the failing block and line, not only the exception
        pytest.fail(f"{doc}:{line}: {type(e).__name__}: {e}")
