"""The pytest plugin, on a sample test module run by pytest in a subprocess."""

import subprocess
import sys
import xml.etree.ElementTree as ET

import pytest

pytest.importorskip("torch")

SAMPLE = '''
import torch
import tensorplay
from tensorplay.testing import assert_passes


def overlapping():
    base = torch.zeros(10)
    return {"a": torch.nn.Parameter(base[0:6]), "b": torch.nn.Parameter(base[4:10])}


def test_unsafe_model_fails(tensorplay):
    tensorplay.assert_passes(overlapping())


def test_clean_model_passes(tensorplay):
    report = tensorplay.assert_passes(torch.nn.Linear(2, 2))
    assert report.passed


def test_assert_passes_without_the_fixture():
    assert_passes(overlapping())
'''


def run_pytest(tmp_path, *args):
    (tmp_path / "test_sample.py").write_text(SAMPLE)
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", *args, "test_sample.py"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
    )


def test_an_unsafe_model_fails_its_test_with_the_human_report(tmp_path):
    done = run_pytest(tmp_path)
    assert done.returncode == 1, done.stdout + done.stderr
    out = done.stdout
    assert "2 failed, 1 passed" in out
    assert "FAILED test_sample.py::test_unsafe_model_fails" in out
    assert "FAILED test_sample.py::test_assert_passes_without_the_fixture" in out
    # The message is the human report, labelled with the test's id when the fixture audits.
    assert "AssertionError: tensorplay audit failed:" in out
    assert "test_sample.py::test_unsafe_model_fails (live, 2 tensors, 1 storage, 40 B)" in out
    assert "error[TP101] view-overlap: 'a' (bytes [0, 24)) and 'b' (bytes [16, 40))" in out
    assert "FAILED (fail-on error)" in out


def test_tensorplay_junit_writes_the_commands_test_cases(tmp_path):
    junit = tmp_path / "out" / "tensorplay.xml"
    done = run_pytest(tmp_path, "--tensorplay-junit", str(junit))
    assert done.returncode == 1
    root = ET.parse(junit).getroot()
    cases = {
        (case.get("classname"), case.get("name")): case.find("failure") is not None
        for case in root.iter("testcase")
    }
    # One audit per fixture call: the failing test's findings fail, the clean model passes.
    failing = [key for key, failed in cases.items() if failed]
    assert failing and all("test_unsafe_model_fails" in key[0] for key in failing)
    assert any("test_clean_model_passes" in key[0] for key in cases)
    assert "TP101" in junit.read_text()


def test_tensorplay_junit_links_the_test_file_and_names_the_test(tmp_path):
    junit = tmp_path / "tensorplay.xml"
    # The root directory, so node ids are `tests/test_sample.py::…`.
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_sample.py").write_text(SAMPLE)
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q",
         "--tensorplay-junit", str(junit), "tests/test_sample.py"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
    )
    assert done.returncode == 1, done.stdout + done.stderr
    cases = list(ET.parse(junit).getroot().iter("testcase"))
    assert cases
    # GitLab links `file`: the test's file, as pytest's own JUnit writes it, not a node id.
    assert {case.get("file") for case in cases} == {"tests/test_sample.py"}
    classes = {case.get("classname") for case in cases}
    assert classes == {
        "tensorplay.tests/test_sample_py::test_unsafe_model_fails",
        "tensorplay.tests/test_sample_py::test_clean_model_passes",
    }
    assert any(case.get("name") == "TP101 view-overlap" for case in cases)


def test_the_option_is_listed_in_help(tmp_path):
    done = run_pytest(tmp_path, "--help")
    assert "--tensorplay-junit=FILE" in done.stdout
