"""Reports: the command's JSON report as Python objects, rendered by the command's renderers."""

import html
import json
import os


class Finding:
    """One finding of the JSON report, with the file it is in.

    Attributes: ``code`` (``TP101``), ``rule`` (its name, also ``name``), ``severity``,
    ``message``, ``tensors`` (names), ``tensor`` (the first, or ``None``), ``storage``,
    ``fix``, ``file``, and ``data``: the finding's JSON object as it is.
    """

    __slots__ = ("data", "file")

    def __init__(self, data, file):
        self.data = data
        self.file = file

    @property
    def code(self):
        return self.data["code"]

    @property
    def rule(self):
        return self.data["rule"]

    name = rule

    @property
    def severity(self):
        return self.data["severity"]

    @property
    def message(self):
        return self.data["message"]

    @property
    def tensors(self):
        return list(self.data.get("tensors", []))

    @property
    def tensor(self):
        tensors = self.data.get("tensors") or []
        return tensors[0] if tensors else None

    @property
    def storage(self):
        return self.data.get("storage")

    @property
    def fix(self):
        return self.data.get("fix")

    def __getitem__(self, key):
        return self.data[key]

    def __eq__(self, other):
        return isinstance(other, Finding) and (self.data, self.file) == (other.data, other.file)

    def __repr__(self):
        return f"<Finding {self.severity}[{self.code}] {self.rule}: {self.message}>"


class Report:
    """What ``tensorplay audit`` reports: the JSON report's data, and its other renderings.

    ``passed``, ``exit_code`` (the command's: 0 passed, 1 findings), ``findings``, ``files``,
    ``summary``, ``data`` (the JSON report as a dict); ``to_json()``, ``human()``, and
    ``write_json``/``write_junit``/``write_sarif``/``write_html``/``write_gitlab_codequality``.
    ``repr()`` is the human report.
    """

    def __init__(self, native):
        self._native = native
        self._data = None

    @property
    def data(self):
        if self._data is None:
            self._data = self._native.data
        return self._data

    @property
    def passed(self):
        return self._native.passed

    @property
    def exit_code(self):
        return 0 if self.passed else 1

    @property
    def summary(self):
        return self.data["summary"]

    @property
    def files(self):
        return self.data["files"]

    @property
    def findings(self):
        return [
            Finding(finding, file["path"])
            for file in self.data["files"]
            for finding in file["findings"]
        ]

    @property
    def codes(self):
        """The codes found, each once, in order."""
        return sorted({finding["code"] for file in self.files for finding in file["findings"]})

    def to_json(self):
        """The JSON report, as ``--json`` writes it."""
        return self._native.render("json")

    def human(self, color=False, verbose=False):
        """The human report, as the command prints it."""
        return self._native.render("human", color=color, verbose=verbose)

    def _write(self, kind, path):
        self._native.write(kind, os.fspath(path))

    def write_json(self, path):
        self._write("json", path)

    def write_junit(self, path):
        self._write("junit", path)

    def write_sarif(self, path):
        self._write("sarif", path)

    def write_html(self, path):
        self._write("html", path)

    def write_gitlab_codequality(self, path):
        self._write("gitlab", path)

    def __repr__(self):
        return self.human()

    __str__ = __repr__

    def _repr_html_(self):
        return f"<pre>{html.escape(self.human())}</pre>"


class Inspection:
    """What ``tensorplay inspect`` shows of a file: ``repr()`` is its text, ``data`` its JSON
    document (``tensors``, ``storages``, ``format``…), ``to_json()`` that document as text."""

    def __init__(self, text, document):
        self._text = text
        self._json = document
        self.data = json.loads(document)

    @property
    def tensors(self):
        return self.data["tensors"]

    @property
    def storages(self):
        return self.data["storages"]

    def to_json(self):
        return self._json

    def __repr__(self):
        return self._text

    __str__ = __repr__

    def _repr_html_(self):
        return f"<pre>{html.escape(self._text)}</pre>"


def combined(reports):
    """One report of the files of ``reports`` (judged at the first one's fail-on level)."""
    from . import _tensorplay

    return Report(_tensorplay.combine([report._native for report in reports]))
