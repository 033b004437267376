"""One audit fanned out over a Ray cluster: each task audits one part (``tensorplay audit
--partition K/N``), and the driver joins the partial reports with ``tensorplay merge``, so the
digest checks of ``merge`` (a missing, duplicated, foreign or edited part is refused) apply as
they do between CI jobs. Ray is an optional extra: ``pip install tensorplay-audit[ray]``;
nothing here imports it before ``audit_many`` is called. See docs/python.md."""

from ._errors import ReadError
from ._report import Report

ENGINES = ("ray",)


def _audit_part(options, paths, k, n):
    """A Ray task's work: ``tensorplay audit --partition K/N`` in the worker's process; its
    partial JSON report as text, sealed as the command seals it (what the driver merges)."""
    from . import _tensorplay

    checked = _tensorplay.options("audit_many", "files", options)
    try:
        return _tensorplay.audit(paths, checked, f"{k}/{n}").render("json")
    except ReadError as error:
        raise ReadError(f"part {k}/{n}: {error}") from None


class MergedReport(Report):
    """The report of an ``audit_many``: ``tensorplay merge`` of the parts, with ``Report``'s
    attributes, renderings and report files. ``parts``: the partial JSON reports, as the tasks
    returned them."""

    def __init__(self, parts, native):
        super().__init__(native)
        self.parts = list(parts)


def audit_many(paths, engine="ray", parts=None, **options):
    """``tensorplay audit PATHS`` split into ``parts`` Ray tasks (default: the CPUs Ray
    reports), each auditing ``--partition K/N`` in its worker, merged by ``tensorplay merge``
    with its digest checks: a ``MergedReport`` with the verdict a single audit gives.

    Options are ``audit_file``'s. Connects to Ray with ``ray.init()`` unless it is already
    initialised. Raises ``ValueError`` for an engine other than ``"ray"``, ``ImportError`` when
    Ray is not installed, ``ReadError`` where a part or the merge exits 2 (a checkpoint not
    judged, a part refused by the digest checks)."""
    if engine not in ENGINES:
        raise ValueError(
            f"audit_many(): engine={engine!r}: the supported engine is 'ray'"
        )
    from . import _paths

    paths = _paths("audit_many", paths)
    from . import _tensorplay

    # Checked here, so a bad option fails before Ray starts.
    _tensorplay.options("audit_many", "files", options)
    if parts is not None and (isinstance(parts, bool) or not isinstance(parts, int) or parts < 1):
        raise TypeError(f"audit_many(): parts={parts!r}: expected an int of at least 1")
    try:
        import ray
    except ImportError as error:
        raise ImportError(
            "tensorplay.distributed.audit_many(engine='ray') needs Ray: "
            "pip install tensorplay-audit[ray]"
        ) from error

    if not ray.is_initialized():
        ray.init()
    n = parts if parts is not None else max(1, int(ray.cluster_resources().get("CPU", 1)))
    task = ray.remote(_audit_part)
    texts = ray.get([task.remote(options, paths, k, n) for k in range(1, n + 1)])
    try:
        merged = _tensorplay.merge(texts)
    except ReadError as error:
        raise ReadError(f"merge: {error}") from None
    return MergedReport(texts, merged)
