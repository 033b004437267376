"""The file API: the command's audit and inspect, as Python objects, nothing printed."""

import json
import xml.etree.ElementTree as ET

import pytest
import tensorplay

from conftest import FIXTURES, command, command_report

OVERLAPPING = FIXTURES / "pytorch/overlapping_params.pt"
CLEAN = FIXTURES / "pytorch/state_dict.pt"


def test_audit_file_reports_what_the_command_reports(tmp_path, capfd):
    report = tensorplay.audit_file(str(OVERLAPPING))
    # Nothing printed: the report is returned.
    assert capfd.readouterr() == ("", "")
    assert not report.passed
    assert report.exit_code == 1
    assert report.codes == ["TP101", "TP102", "TP106"]
    first = report.findings[0]
    assert (first.code, first.rule, first.severity) == ("TP101", "view-overlap", "error")
    assert first.tensors == ["a", "b"] and first.tensor == "a"
    assert first.file == str(OVERLAPPING)
    expected, code = command_report(tmp_path, OVERLAPPING)
    assert code == report.exit_code
    assert json.loads(report.to_json()) == expected == report.data


def test_the_human_report_is_the_commands(tmp_path):
    report = tensorplay.audit_file(OVERLAPPING)
    printed = command("audit", "--color", "never", OVERLAPPING).stdout
    assert repr(report) == printed
    assert "\x1b[" in report.human(color=True)
    assert "<pre>" in report._repr_html_()


def test_a_clean_file_passes():
    report = tensorplay.audit_file(CLEAN)
    assert report.passed and report.exit_code == 0
    assert report.findings == []


def test_options_are_the_commands_flags(tmp_path):
    only = tensorplay.audit_file(OVERLAPPING, select=["TP106"])
    assert only.codes == ["TP106"]
    assert only.passed  # TP106 is an info
    ignored = tensorplay.audit_file(OVERLAPPING, ignore="TP101,TP102")
    assert ignored.codes == ["TP106"]
    never = tensorplay.audit_file(OVERLAPPING, fail_on="never")
    assert never.passed and never.codes == ["TP101", "TP102", "TP106"]
    expected, _ = command_report(tmp_path, OVERLAPPING, flags=["--select", "TP106"])
    assert only.data == expected


def test_select_takes_a_prefix_or_a_name_as_the_command_does(tmp_path):
    views = tensorplay.audit_file(OVERLAPPING, select="TP1")
    assert views.codes == ["TP101", "TP102", "TP106"]
    expected, _ = command_report(tmp_path, OVERLAPPING, flags=["--select", "TP1"])
    assert views.data == expected
    assert tensorplay.audit_file(OVERLAPPING, select=["view-overlap", "TP10"]).codes == [
        "TP101", "TP102", "TP106"
    ]
    assert tensorplay.audit_file(OVERLAPPING, select="grad-view").codes == ["TP102"]
    assert tensorplay.audit_file(OVERLAPPING, ignore=["TP10"]).codes == []
    assert tensorplay.audit_file(OVERLAPPING, select="TP5").codes == []
    # One resolver, one message: what the command prints after `error: `.
    for wrong, meant in [("TP109", "TP101 view-overlap"), ("unsafe-globl", "TP501 unsafe-global")]:
        stderr = command("audit", "--select", wrong, OVERLAPPING).stderr
        assert stderr == f"error: unknown rule '{wrong}' (did you mean {meant}?)\n"
        with pytest.raises(tensorplay.UsageError) as raised:
            tensorplay.audit_file(OVERLAPPING, select=wrong)
        assert f"error: {raised.value}\n" == stderr
        with pytest.raises(tensorplay.UsageError) as raised:
            tensorplay.audit_file(OVERLAPPING, ignore=["TP1", wrong])
        assert f"error: {raised.value}\n" == stderr


def test_the_report_writers_write_the_commands_reports(tmp_path):
    report = tensorplay.audit_file(OVERLAPPING)
    report.write_junit(tmp_path / "r.xml")
    report.write_sarif(tmp_path / "r.sarif")
    report.write_html(tmp_path / "r.html")
    report.write_json(tmp_path / "r.json")
    done = command(
        "audit", "--color", "never", "--junit", tmp_path / "c.xml", "--sarif", tmp_path / "c.sarif",
        OVERLAPPING,
    )
    assert done.returncode == 1
    # JUnit carries a timestamp; the test cases are the same.
    cases = lambda p: [
        (c.get("classname"), c.get("name"), c.find("failure") is not None)
        for c in ET.parse(p).getroot().iter("testcase")
    ]
    assert cases(tmp_path / "r.xml") == cases(tmp_path / "c.xml")
    assert any(failed for _, _, failed in cases(tmp_path / "r.xml"))
    sarif = json.loads((tmp_path / "r.sarif").read_text())
    assert {r["ruleId"] for r in sarif["runs"][0]["results"]} == {"TP101", "TP102", "TP106"}
    assert sarif == json.loads((tmp_path / "c.sarif").read_text())
    page = (tmp_path / "r.html").read_text()
    assert page.startswith("<!DOCTYPE html>") and "TP101" in page
    assert json.loads((tmp_path / "r.json").read_text()) == report.data


def test_errors_carry_the_commands_message():
    missing = "/nonexistent/model.pt"
    stderr = command("audit", missing).stderr
    with pytest.raises(tensorplay.ReadError) as raised:
        tensorplay.audit_file(missing)
    assert f"error: {raised.value}\n" == stderr
    with pytest.raises(tensorplay.UsageError, match="fail_on='sometimes': invalid value"):
        tensorplay.audit_file(OVERLAPPING, fail_on="sometimes")
    with pytest.raises(tensorplay.UsageError, match="TP999"):
        tensorplay.audit_file(OVERLAPPING, select="TP999")
    # One hierarchy: every failure is a tensorplay.Error.
    assert issubclass(tensorplay.ReadError, tensorplay.Error)
    assert issubclass(tensorplay.UsageError, ValueError)


def test_a_hostile_file_is_judged_not_run(tmp_path):
    marker = tmp_path / "ran"
    report = tensorplay.audit_file(FIXTURES / "pytorch/payload_os_system.pt")
    assert "TP501" in report.codes and not report.passed
    assert not marker.exists()


def test_bad_arguments_are_type_errors_naming_what_is_accepted():
    with pytest.raises(TypeError, match=r"audit_file\(\) takes a path \(str or os.PathLike\)"):
        tensorplay.audit_file(42)
    with pytest.raises(TypeError, match="unexpected keyword argument 'colour'.*select"):
        tensorplay.audit_file(OVERLAPPING, colour="never")
    with pytest.raises(TypeError, match="fail_on=3: invalid type: .*expected 'error', 'warning' or 'never'"):
        tensorplay.audit_file(OVERLAPPING, fail_on=3)
    with pytest.raises(TypeError, match="metadata_only='yes': invalid type: .*expected True or False"):
        tensorplay.audit_file(OVERLAPPING, metadata_only="yes")


def test_the_keywords_are_the_commands_audit_options_and_none_is_the_default(tmp_path):
    with pytest.raises(TypeError, match="it accepts (.*)") as raised:
        tensorplay.audit_file(OVERLAPPING, colour="never")
    accepted = raised.value.args[0].split("it accepts ", 1)[1].split(", ")
    assert {"select", "fail_on", "load_to", "timeout_per_file"} <= set(accepted)
    help_text = command("audit", "--help").stdout
    for name in accepted:
        assert f"--{name.replace('_', '-')}" in help_text, name
    # None leaves an option at its default; a path may be any os.PathLike.
    default = tensorplay.audit_file(OVERLAPPING, fail_on=None, select=None, config=None)
    assert default.codes == ["TP101", "TP102", "TP106"] and not default.passed
    budget = tensorplay.audit_file(OVERLAPPING, gpu_budget="1KiB", max_memory=1 << 30)
    assert "TP303" in budget.codes
    assert budget.data == command_report(tmp_path, OVERLAPPING, flags=["--gpu-budget", "1KiB"])[0]
    with pytest.raises(TypeError, match=r"timeout_per_file=True: invalid type: boolean"):
        tensorplay.audit_file(OVERLAPPING, timeout_per_file=True)
    with pytest.raises(tensorplay.UsageError, match=r"timeout_per_file=0: invalid value"):
        tensorplay.audit_file(OVERLAPPING, timeout_per_file=0)
    with pytest.raises(tensorplay.UsageError, match=r"gpu_budget='lots': .*unknown unit"):
        tensorplay.audit_file(OVERLAPPING, gpu_budget="lots")


def test_several_paths_make_one_report():
    report = tensorplay.audit_file([OVERLAPPING, CLEAN])
    assert [f["path"] for f in report.files] == [str(OVERLAPPING), str(CLEAN)]
    assert report.summary["files"] == 2


def test_inspect_file_is_the_commands_inspect():
    shown = tensorplay.inspect_file(OVERLAPPING)
    assert repr(shown) == command("inspect", OVERLAPPING).stdout
    assert [t["name"] for t in shown.tensors] == ["a", "b"]
    assert len(shown.storages) == 1
    assert json.loads(shown.to_json()) == json.loads(command("inspect", "--format", "json", OVERLAPPING).stdout)
    one = tensorplay.inspect_file(OVERLAPPING, tensor="b")
    assert [t["name"] for t in one.tensors] == ["b"]
    with pytest.raises(tensorplay.ReadError, match="no tensor named 'c'"):
        tensorplay.inspect_file(OVERLAPPING, tensor="c")
