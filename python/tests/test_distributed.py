"""tensorplay.distributed.audit_many on a local Ray cluster (two CPUs) over the repository's
fixtures: the parts' merged report is the single-process audit's, and `merge`'s digest checks
refuse a part edited between its task and the driver. Skipped only where Ray is not installed
(scripts/check-python.sh installs the pinned Ray, python/tests/requirements-ray.txt, in the
torch run and fails if these tests skip there)."""

import json
import subprocess
import sys

import pytest
import tensorplay

from conftest import FIXTURES, command_report


def test_import_tensorplay_does_not_import_ray():
    code = (
        "import sys, tensorplay; assert 'ray' not in sys.modules; "
        "assert 'tensorplay.distributed' not in sys.modules; "
        "d = tensorplay.distributed; assert 'ray' not in sys.modules; print(d.__name__)"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "tensorplay.distributed"


def test_an_unknown_engine_is_refused_naming_ray():
    with pytest.raises(ValueError, match="supported engine is 'ray'"):
        tensorplay.distributed.audit_many([FIXTURES / "pytorch"], engine="dask")


def test_options_are_checked_as_audit_files_are():
    with pytest.raises(TypeError, match="unexpected keyword argument 'colour'"):
        tensorplay.distributed.audit_many([FIXTURES / "pytorch"], colour=True)
    with pytest.raises(TypeError, match="parts=0"):
        tensorplay.distributed.audit_many([FIXTURES / "pytorch"], parts=0)


def test_without_ray_the_error_says_how_to_install_it(monkeypatch):
    # None in sys.modules: `import ray` raises ImportError, as where Ray is not installed.
    monkeypatch.setitem(sys.modules, "ray", None)
    with pytest.raises(ImportError, match=r"pip install tensorplay-audit\[ray\]"):
        tensorplay.distributed.audit_many([FIXTURES / "pytorch"])


def test_ray_is_an_extra_never_a_dependency_of_the_wheel():
    from importlib import metadata

    from packaging.requirements import Requirement

    meta = metadata.metadata("tensorplay-audit")
    assert "ray" in (meta.get_all("Provides-Extra") or [])
    requirements = [Requirement(r) for r in meta.get_all("Requires-Dist") or []]
    # Nothing installed without an extra asked for.
    assert all(r.marker is not None and not r.marker.evaluate({"extra": ""}) for r in requirements)
    assert "ray" in {r.name for r in requirements if r.marker.evaluate({"extra": "ray"})}


ray = pytest.importorskip("ray")


@pytest.fixture(scope="module")
def cluster():
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield
    ray.shutdown()


def comparable(data):
    """The report without what may differ between runs of the same audit."""
    data = json.loads(json.dumps(data))
    data.pop("partition", None)
    for key in ("duration_ms", "elapsed_ms", "timing"):
        data.get("summary", {}).pop(key, None)
    return data


def test_the_merged_report_is_the_single_process_one(cluster, tmp_path):
    single = tensorplay.audit_file(FIXTURES)
    merged = tensorplay.distributed.audit_many([FIXTURES])
    # Two CPUs: two parts, each given some of the fixtures.
    assert len(merged.parts) == 2
    inputs = [json.loads(part)["partition"]["inputs"] for part in merged.parts]
    assert all(inputs) and len(merged.files) > 100
    assert merged.exit_code == single.exit_code == 1
    assert merged.passed is False
    assert [f["path"] for f in merged.files] == [f["path"] for f in single.files]
    assert merged.findings == single.findings
    assert comparable(merged.data) == comparable(single.data)
    # The command's own single-process JSON report, too.
    expected, code = command_report(tmp_path, FIXTURES)
    assert code == merged.exit_code
    assert comparable(merged.data) == comparable(expected)
    # Its report files are merge's, from the same parts.
    merged.write_json(tmp_path / "merged.json")
    assert json.loads((tmp_path / "merged.json").read_text()) == merged.data
    merged.write_junit(tmp_path / "merged.xml")
    assert "<testsuite" in (tmp_path / "merged.xml").read_text()
    assert merged.human().rstrip().splitlines()[-1] == single.human().rstrip().splitlines()[-1]


def test_more_parts_than_cpus_and_options(cluster):
    single = tensorplay.audit_file(FIXTURES / "pytorch", select="TP1", fail_on="never")
    merged = tensorplay.distributed.audit_many(
        [FIXTURES / "pytorch"], parts=5, select="TP1", fail_on="never"
    )
    assert len(merged.parts) == 5
    assert merged.passed and single.passed
    assert merged.codes == single.codes and merged.codes
    assert comparable(merged.data) == comparable(single.data)


def test_a_part_edited_after_its_task_is_refused(cluster, monkeypatch):
    real_get = ray.get

    def tampered_get(refs, *args, **kwargs):
        texts = real_get(refs, *args, **kwargs)
        part = json.loads(texts[1])
        # A finding deleted from the second part: what its report_digest guards.
        for file in part["files"]:
            if file["findings"]:
                file["findings"].pop()
                break
        else:
            raise AssertionError("the second part has no finding to delete")
        return [texts[0], json.dumps(part, indent=2), *texts[2:]]

    monkeypatch.setattr(ray, "get", tampered_get)
    with pytest.raises(tensorplay.ReadError, match="merge: .*digest"):
        tensorplay.distributed.audit_many([FIXTURES])


def test_a_missing_part_is_refused(cluster, monkeypatch):
    real_get = ray.get
    monkeypatch.setattr(ray, "get", lambda refs, *a, **k: real_get(refs, *a, **k)[:-1])
    with pytest.raises(tensorplay.ReadError, match="merge: "):
        tensorplay.distributed.audit_many([FIXTURES], parts=3)


def test_a_part_that_cannot_read_its_input_is_a_read_error(cluster, tmp_path):
    missing = tmp_path / "missing.safetensors"
    with pytest.raises(tensorplay.ReadError, match="missing.safetensors"):
        tensorplay.distributed.audit_many([missing], parts=2)
