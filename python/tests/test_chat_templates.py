"""The chat-template oracle: jinja2's `ImmutableSandboxedEnvironment`, configured as
transformers' `apply_chat_template` configures it, renders every fixture template
(`fixtures/chat_templates/`) with ordinary messages. Every template it refuses with
`SecurityError` must fail the gate in every container it is in, every real model family's
template and every template the pinned transformers carries must render and pass, and the
sandbox must still do what `truth.json` recorded when the fixtures were made.
"""

import hashlib
import json
import re
from datetime import datetime

import jinja2
import jinja2.ext
import jinja2.nodes
import pytest
from jinja2.exceptions import SecurityError, TemplateError
from jinja2.sandbox import ImmutableSandboxedEnvironment

from conftest import FIXTURES, ROOT, command

DIR = FIXTURES / "chat_templates"
TRUTH = json.loads((DIR / "truth.json").read_text())
TEMPLATES = TRUTH["templates"]


class Generation(jinja2.ext.Extension):
    """transformers' `AssistantTracker`: `{% generation %}…{% endgeneration %}` renders its
    body (transformers also notes where, for the assistant mask)."""

    tags = {"generation"}

    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(["name:endgeneration"], drop_needle=True)
        return jinja2.nodes.CallBlock(self.call_method("_body"), [], [], body).set_lineno(lineno)

    def _body(self, caller):
        return caller()


def sandbox():
    """transformers' `_compile_jinja_template` (4.57.6): the immutable sandbox, trim_blocks
    and lstrip_blocks, its `generation` tag and loop controls, `raise_exception`,
    `strftime_now` and `tojson`."""

    def raise_exception(message):
        raise TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(
            x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys
        )

    env = ImmutableSandboxedEnvironment(
        trim_blocks=True, lstrip_blocks=True, extensions=[Generation, jinja2.ext.loopcontrols]
    )
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = lambda fmt: datetime.now().strftime(fmt)
    return env


def render(text, messages="text"):
    """What the sandbox does with the template: "ok", or the type of what it raised.
    `messages` "parts": each content a list of typed parts, as processors take it."""
    try:
        sandbox().from_string(text).render(
            messages=TRUTH["messages"] if messages == "text" else TRUTH["part_messages"],
            add_generation_prompt=True,
            bos_token="<s>",
            eos_token="</s>",
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
    verdict = render(text, template.get("messages", "text"))
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
    assert sum(t["expect"] == "pass" for t in TEMPLATES) == 20


def test_every_template_the_pinned_transformers_carries_renders_and_passes(gate):
    """The templates of transformers' tests and its processors' defaults (truth.json names
    the file and line of each): the sandbox renders every one, the gate passes every one."""
    shipped = [t for t in TEMPLATES if t["name"].startswith("transformers/")]
    assert len(shipped) == 13
    assert TRUTH["transformers"] == "4.57.6"
    # `{% generation %}` is transformers' own tag: the oracle knows it, and so must the gate.
    assert any("{% generation %}" in text_at(t["in"][0]) for t in shipped)
    for t in shipped:
        assert render(text_at(t["in"][0]), t["messages"]) == "ok", t["name"]
        for place in t["in"]:
            assert not gate.get((place["file"], place["location"])), (t["name"], place)


def test_template_baseline_is_the_commands_flag(tmp_path):
    """`audit_file(..., template_baseline=FILE)` is `--template-baseline FILE`: a template
    pinned in FILE passes, one not pinned fails with TP706 naming its hash, as the command
    reports it; a baseline that is none is refused before anything is read (the command's exit 2,
a ReadError); live tensors carry
    no template, so `audit` does not take the option."""
    import tensorplay

    sha = {t["name"]: t["sha256"] for t in TEMPLATES}
    baseline = tmp_path / "templates.sha256"
    baseline.write_text(f"# served\n{sha['real/phi3']}  phi3\n")
    phi3 = DIR / "real/phi3/model.gguf"
    assert tensorplay.audit_file(phi3, template_baseline=baseline).passed
    assert tensorplay.audit_file(phi3).passed
    gemma = DIR / "real/gemma2/model.gguf"
    assert tensorplay.audit_file(gemma).passed  # no baseline: the real template passes
    report = tensorplay.audit_file(gemma, template_baseline=str(baseline))
    assert not report.passed
    assert report.codes == ["TP706"]
    assert sha["real/gemma2"] in report.findings[0].message
    # The same run through the command gives the same findings.
    out = tmp_path / "command.json"
    done = command("audit", "--template-baseline", baseline, "--json", out, gemma)
    assert done.returncode == 1, done.stderr
    file = json.loads(out.read_text())["files"][0]
    assert [f["code"] for f in file["findings"]] == report.codes
    assert [f["message"] for f in file["findings"]] == [f.message for f in report.findings]

    bad = tmp_path / "bad"
    bad.write_text("not-a-hash phi3\n")
    # The command exits 2 naming the line, before reading anything: a ReadError here.
    with pytest.raises(tensorplay.ReadError, match=r"bad:1: template baseline: 'not-a-hash'"):
        tensorplay.audit_file(phi3, template_baseline=bad)
    with pytest.raises(TypeError, match="template_baseline=3: .*expected a path"):
        tensorplay.audit_file(phi3, template_baseline=3)
    with pytest.raises(TypeError, match="unexpected keyword argument 'template_baseline'"):
        tensorplay.audit({}, template_baseline=baseline)
