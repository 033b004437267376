"""One audit fanned out over a Ray cluster: each task audits one part (``tensorplay audit
--partition K/N``), and the driver joins the partial reports with ``tensorplay merge``, so the
digest checks of ``merge`` (a missing, duplicated, foreign or edited part is refused) apply as
they do between CI jobs. Ray is an optional extra: ``pip install tensorplay-audit[ray]``;
nothing here imports it before ``audit_many`` is called. See docs/python.md."""

import contextlib
import json
import os
import sys
import tempfile

from ._errors import ReadError
from ._report import Report

ENGINES = ("ray",)

# What the merged report can be written as: merge's report-file flags (JSON: its own text).
_FILE_FLAGS = {
    "junit": "--junit",
    "sarif": "--sarif",
    "html": "--html",
    "gitlab": "--gitlab-codequality",
}


@contextlib.contextmanager
def _captured(directory):
    """The command's stdout and stderr (file descriptors 1 and 2: the command runs in this
    process) into two files, read back as ``[stdout, stderr]`` once the block ends."""
    out = [None, None]
    sys.stdout.flush()
    sys.stderr.flush()
    saved = [os.dup(1), os.dup(2)]
    paths = [os.path.join(directory, "stdout"), os.path.join(directory, "stderr")]
    try:
        for fd, path in zip((1, 2), paths):
            with open(path, "wb") as file:
                os.dup2(file.fileno(), fd)
        yield out
    finally:
        for fd, copy in zip((1, 2), saved):
            os.dup2(copy, fd)
            os.close(copy)
        for i, path in enumerate(paths):
            with open(path, encoding="utf-8", errors="replace") as file:
                out[i] = file.read()


def _run(argv, directory):
    """``tensorplay ARGV`` in this process: (exit code, stdout, stderr)."""
    from . import _tensorplay

    with _captured(directory) as streams:
        code = _tensorplay.run(["tensorplay", *argv])
    return code, streams[0], streams[1]


def _error(what, stderr):
    # The command's message lines, without their `error: ` prefix (as ReadError's are).
    lines = [line[len("error: "):] if line.startswith("error: ") else line
             for line in stderr.strip().splitlines() if line.strip()]
    return ReadError(f"{what}: " + ("; ".join(lines) or "exit code 2, no message"))


def _audit_part(options, paths, k, n):
    """A Ray task's work: ``tensorplay audit --partition K/N`` in the worker's process; its
    partial JSON report as text (what the driver merges)."""
    from . import _tensorplay

    checked = _tensorplay.options("audit_many", "files", options)
    try:
        return _tensorplay.audit(paths, checked, f"{k}/{n}").render("json")
    except ReadError as error:
        raise ReadError(f"part {k}/{n}: {error}") from None


def _merge(parts, directory, extra=()):
    """``tensorplay merge`` over the parts' texts, written to ``directory``: (stdout, the
    merged JSON text). Exit 2 (a part refused, a checkpoint not judged) raises ``ReadError``."""
    names = []
    for i, text in enumerate(parts):
        name = os.path.join(directory, f"part-{i + 1}.json")
        with open(name, "w", encoding="utf-8") as file:
            file.write(text)
        names.append(name)
    merged = os.path.join(directory, "merged.json")
    code, stdout, stderr = _run(["merge", "--json", merged, *extra, *names], directory)
    if code not in (0, 1):
        raise _error("merge", stderr)
    with open(merged, encoding="utf-8") as file:
        return stdout, file.read()


class MergedReport(Report):
    """The report of an ``audit_many``: the JSON report ``tensorplay merge`` wrote from the
    parts, with ``Report``'s attributes (``passed``, ``exit_code``, ``findings``, ``files``,
    ``data``…). Its renderings and report files are ``merge``'s, run again over the same parts
    (no checkpoint is read again). ``parts``: the partial JSON reports, as the tasks returned
    them."""

    def __init__(self, parts, text):
        super().__init__(None)
        self.parts = list(parts)
        self._text = text
        self._data = json.loads(text)

    @property
    def passed(self):
        return bool(self._data["summary"]["passed"])

    def to_json(self):
        return self._text

    def human(self, color=False, verbose=False):
        extra = ["--format", "human", "--color", "always" if color else "never"]
        if verbose:
            extra.append("--verbose")
        with tempfile.TemporaryDirectory(prefix="tensorplay-merge-") as directory:
            return _merge(self.parts, directory, extra)[0]

    def _write(self, kind, path):
        if kind == "json":
            # The merged JSON report itself, as merge wrote it.
            with open(os.fspath(path), "w", encoding="utf-8") as file:
                file.write(self._text)
            return
        with tempfile.TemporaryDirectory(prefix="tensorplay-merge-") as directory:
            _merge(self.parts, directory, ["--format", "json", _FILE_FLAGS[kind], os.fspath(path)])


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
    with tempfile.TemporaryDirectory(prefix="tensorplay-merge-") as directory:
        _, merged = _merge(texts, directory, ["--format", "json"])
    return MergedReport(texts, merged)
