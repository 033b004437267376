"""The wheel: the command works as the binary did, and the package imports without torch."""

import subprocess
import sys

from conftest import COMMAND, FIXTURES, command


def test_the_command_runs_from_the_wheel_with_its_exit_codes():
    version = command("--version")
    assert version.returncode == 0
    assert version.stdout.startswith("tensorplay ")
    failing = command("audit", "--color", "never", FIXTURES / "pytorch/overlapping_params.pt")
    assert failing.returncode == 1
    assert "error[TP101] view-overlap" in failing.stdout
    *_, verdict, counts = failing.stdout.splitlines()
    assert "FAILED" in verdict
    assert counts.startswith("2 TP102 grad-view, 1 TP101 view-overlap, 1 TP106 shared-storage; ")
    passing = command("audit", "--color", "never", FIXTURES / "pytorch/state_dict.pt")
    assert passing.returncode == 0, passing.stdout


def test_usage_errors_and_help_return_the_command_codes():
    bad = command("audit", "--fail-on", "sometimes", "x.pt")
    assert bad.returncode == 2
    assert "invalid value 'sometimes'" in bad.stderr
    assert bad.stderr.endswith("For more information, try '--help'.\n")
    helped = command("--help")
    assert helped.returncode == 0
    assert helped.stdout.startswith("A CI gate that audits machine-learning checkpoints")
    missing = command("audit", "/nonexistent/model.pt")
    assert missing.returncode == 2
    assert missing.stderr.startswith("error: ")


def test_a_closed_pipe_is_not_a_failure():
    # `tensorplay inspect … | head -1`: the command ends quietly, as the binary does.
    shell = f"'{COMMAND}' inspect '{FIXTURES / 'pytorch/state_dict.pt'}' | head -c 10"
    done = subprocess.run(["bash", "-o", "pipefail", "-c", shell], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr


def test_importing_tensorplay_imports_no_torch():
    code = "import sys, tensorplay; r = tensorplay.audit_file(sys.argv[1]); print('torch' in sys.modules, r.passed)"
    done = subprocess.run(
        [sys.executable, "-c", code, str(FIXTURES / "pytorch/state_dict.pt")],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["False", "True"]


def test_python_m_tensorplay_is_the_command():
    done = subprocess.run([sys.executable, "-m", "tensorplay", "--version"], capture_output=True, text=True)
    assert done.returncode == 0
    assert done.stdout == command("--version").stdout


def test_the_package_exports_exactly_its_documented_names():
    import re

    # In a fresh interpreter: no pytest plugin or test has imported a submodule there.
    code = (
        "import json, tensorplay; "
        "print(json.dumps([tensorplay.__all__, dir(tensorplay), "
        "callable(tensorplay.testing.assert_passes), repr(tensorplay.UsageError)]))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    exported, names, assert_passes, usage_error = __import__("json").loads(done.stdout)
    # tensorplay.testing without `import tensorplay.testing`, as docs/python.md shows it.
    assert assert_passes
    public = sorted(n for n in names if not n.startswith("_"))
    assert public == sorted(exported), set(public) ^ set(exported)
    assert "os" not in names and "errors" not in names
    assert usage_error == "<class 'tensorplay.UsageError'>"
    # The docs' list of names (docs/python.md, "Names") is __all__, no more, no fewer.
    doc = (FIXTURES.parent / "docs/python.md").read_text()
    section = doc.split("\n## Names\n", 1)[1].split("\n## ", 1)[0]
    listed = re.findall(r"`([A-Za-z_]+)`", section.split("`dir(tensorplay)`", 1)[1])
    assert sorted(listed) == sorted(exported)


def test_the_shipped_stubs_type_every_exported_name():
    # The stubs beside the installed package (py.typed marks them as its types) define each
    # name of __all__, so a name added to the API without its type fails here.
    import ast
    import pathlib

    import tensorplay

    package = pathlib.Path(tensorplay.__file__).parent
    assert (package / "py.typed").is_file()
    stub = ast.parse((package / "__init__.pyi").read_text(encoding="utf-8"))
    typed = set()
    for node in stub.body:
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            typed.add(node.name)
        elif isinstance(node, ast.ImportFrom):
            typed.update(alias.asname or alias.name for alias in node.names)
    missing = sorted(set(tensorplay.__all__) - typed)
    assert not missing, f"exported without a type in __init__.pyi: {missing}"
