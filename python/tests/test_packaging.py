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
    assert "FAILED" in failing.stdout.splitlines()[-1]
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
