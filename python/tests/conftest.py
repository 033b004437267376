"""Shared helpers: the repository's fixtures and the installed `tensorplay` command."""

import json
import os
import pathlib
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "fixtures"
# The command the wheel installed beside this interpreter.
COMMAND = pathlib.Path(sys.executable).with_name("tensorplay")


def command(*args, cwd=None):
    """Runs the installed `tensorplay` command; returns the completed process."""
    return subprocess.run(
        [str(COMMAND), *map(str, args)],
        capture_output=True,
        text=True,
        cwd=cwd,
        env={**os.environ, "NO_COLOR": "1"},
    )


def command_report(tmp_path, *paths, flags=()):
    """The JSON report `tensorplay audit --json` writes for `paths`, and its exit code."""
    out = tmp_path / "command.json"
    done = command("audit", "--color", "never", *flags, "--json", out, *paths)
    assert done.returncode in (0, 1), done.stderr
    return json.loads(out.read_text()), done.returncode


@pytest.fixture
def fixtures():
    return FIXTURES
