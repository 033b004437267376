"""A typed user of the package, checked by mypy against the shipped stubs (scripts/check-python.sh):
each line is a use docs/python.md shows, so a stub that drifts from the API fails here."""

from pathlib import Path
from typing import Dict, List, Optional

import tensorplay
from tensorplay import Finding, Report


def gate(path: Path) -> bool:
    report: Report = tensorplay.audit_file(path, select="TP1", fail_on="warning", metadata_only=True)
    codes: List[str] = report.codes
    first: Optional[Finding] = report.findings[0] if report.findings else None
    if first is not None:
        fix: str = first.fix
        tensors: List[str] = first.tensors
        print(fix, tensors)
    report.write_sarif(path.with_suffix(".sarif"))
    summary: Dict[str, object] = report.summary
    print(codes, summary, report.exit_code, report.human(verbose=True))
    return report.passed


def pinned(path: Path) -> bool:
    return tensorplay.audit_file(path, template_baseline=path.with_name("templates.sha256")).passed


def several(paths: List[str]) -> int:
    return tensorplay.audit_file(paths, ignore=["TP501", "view-overlap"], max_memory="4GiB").exit_code


def live(model: object) -> None:
    tensorplay.testing.assert_passes(model)
    report = tensorplay.audit(model, label="resnet", select=["TP2"])
    with tensorplay.watch(model, strict=True) as watched:
        pass
    print(report.passed, watched.passed)
    for layers in tensorplay.inspect(model):
        print(layers.name, layers.sizes, layers.data_ptr_consistent)
    for shared in tensorplay.list_shared_storages(model):
        print(shared.nbytes, [name for name, _, _ in shared.tensors])


def batches(loader: List[Dict[str, object]]) -> float:
    frag = tensorplay.fragmentation(loader, batches=10, gpu_budget="24GiB")
    worst = frag.worst
    return worst.score or 0.0 if worst is not None else frag.threshold


def load(path: str) -> None:
    try:
        tensors = tensorplay.safe_load(path)
    except tensorplay.UnsafeCheckpointError as refused:
        print(refused.report.human())
        return
    print(sorted(tensors))
    check = tensorplay.validate_state_dict_load(object(), tensors)
    print(check.ok, check.problems, [m.field for m in check.mismatched])


def misuse(path: str) -> None:
    # A wrong option name or value kind is a type error, not only a run-time one.
    tensorplay.audit_file(path, fail_on="sometimes")  # type: ignore[arg-type]
    tensorplay.audit_file(path, selcet="TP1")  # type: ignore[call-arg]
    tensorplay.audit_file(path, template_baseline=3)  # type: ignore[arg-type]
    # Live tensors carry no chat template: the option is the file API's only.
    tensorplay.audit(object(), template_baseline=path)  # type: ignore[call-arg]


def fanned_out(paths: List[str]) -> int:
    import tensorplay.distributed

    report: Report = tensorplay.distributed.audit_many(paths, parts=4, select="TP1", fail_on="warning")
    tensorplay.distributed.audit_many(paths, colour=True)  # type: ignore[call-arg]
    tensorplay.distributed.audit_many(paths, engine="dask")  # type: ignore[arg-type]
    return report.exit_code
