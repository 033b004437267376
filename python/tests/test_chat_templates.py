"""The chat-template oracle: jinja2's `ImmutableSandboxedEnvironment`, configured as
transformers' `apply_chat_template` configures it, renders every fixture template
(`fixtures/chat_templates/`) with ordinary messages. Every template it refuses with
`SecurityError` must fail the gate in every container it is in, every real model family's
template must render and pass, and the sandbox must still do what `truth.json` recorded
when the fixtures were made.
"""

import hashlib
import json
import re

import jinja2
import jinja2.ext
import pytest
from jinja2.exceptions import SecurityError, TemplateError
from jinja2.sandbox import ImmutableSandboxedEnvironment

from conftest import FIXTURES, ROOT, command

DIR = FIXTURES / "chat_templates"
TRUTH = json.loads((DIR / "truth.json").read_text())
TEMPLATES = TRUTH["templates"]


def sandbox():
    """transformers' `_compile_jinja_template`: the immutable sandbox, trim_blocks and
    lstrip_blocks, loop controls, `raise_exception` and `tojson` (its `{% generation %}`
    extension is left out: no fixture uses it)."""

    def raise_exception(message):
        raise TemplateError(message)

    env = ImmutableSandboxedEnvironment(
        trim_blocks=True, lstrip_blocks=True, extensions=[jinja2.ext.loopcontrols]
    )
    env.filters["tojson"] = lambda x, indent=None: json.dumps(x, indent=indent, ensure_ascii=False)
    env.globals["raise_exception"] = raise_exception
    return env


def render(text):
    """What the sandbox does with the template: "ok", or the type of what it raised."""
    try:
        sandbox().from_string(text).render(
            messages=TRUTH["messages"], add_generation_prompt=True, bos_token="<s>", eos_token="</s>"
        )
        return "ok"
    except Exception as e:  # noqa: BLE001: the type is the verdict
        return type(e).__name__


def text_at(place):
    """A template's text as its container holds it (the JSON and `.jinja` files; the GGUF
    file's copy is checked by hash on the Rust side, against gguf-py's reading)."""
    path = ROOT / place["file"]
    location = place["location"]
    if location is None:
        return path.read_text()
    config = json.loads(path.read_text())
    if location == "$.chat_template":
        return config["chat_template"]
    index = int(re.match(r"\$\.chat_template\[(\d+)\]\.template", location).group(1))
    return config["chat_template"][index]["template"]


@pytest.fixture(scope="module")
def gate(tmp_path_factory):
    """(file, location) -> the severities and codes of the gate's findings about it."""
    out = tmp_path_factory.mktemp("gate") / "report.json"
    done = command("audit", "--fail-on", "never", "--json", out, DIR.relative_to(ROOT), cwd=ROOT)
    assert done.returncode == 0, done.stderr
    found = {}
    for file in json.loads(out.read_text())["files"]:
        for f in file["findings"]:
            t = f.get("template")
            if t is not None:
                found.setdefault((t["file"], t["location"]), set()).add((f["severity"], f["code"]))
    return found


@pytest.mark.parametrize("template", TEMPLATES, ids=[t["name"] for t in TEMPLATES])
def test_the_sandbox_and_the_gate_agree(template, gate):
    places = template["in"]
    texts = {text_at(p) for p in places if not p["file"].endswith(".gguf")}
    assert len(texts) == 1, template["name"]
    text = texts.pop()
    assert hashlib.sha256(text.encode()).hexdigest() == template["sha256"]
    verdict = render(text)
    # The pinned jinja2 still behaves as it did when the fixtures were written.
    assert verdict == template["sandbox"], template["name"]
    for place in places:
        found = gate.get((place["file"], place["location"]), set())
        errors = {code for severity, code in found if severity == "error"}
        if verdict == "SecurityError":
            assert errors, f"the sandbox refuses {template['name']}; the gate passed {place}"
        if template["expect"] == "pass":
            assert verdict == "ok", template["name"]
            assert not found, f"{template['name']} at {place}: {found}"
        else:
            assert errors == set(template["codes"]) - {"TP705"}, (template["name"], place, found)


def test_the_oracle_refuses_what_it_should():
    """The oracle itself: a published payload raises SecurityError, a plain template renders."""
    with pytest.raises(SecurityError):
        sandbox().from_string("{{ lipsum.__globals__['os'] }}").render()
    assert render("{% for m in messages %}{{ m.content }}{% endfor %}") == "ok"
    assert sum(t["sandbox"] == "SecurityError" for t in TEMPLATES) == 9
    assert sum(t["expect"] == "pass" for t in TEMPLATES) == 7
