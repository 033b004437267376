"""tensorplay's pytest plugin (entry point ``pytest11``): the ``tensorplay`` fixture, and
``--tensorplay-junit FILE`` writing every audit the tests ran as one JUnit report, the test
cases the command's ``--junit`` writes. A live audit's cases are named after the test (its
node id in ``classname``) and link the test's file (``file``); a file's audit links the
checkpoint."""

import pytest

_REPORTS = pytest.StashKey()


def pytest_addoption(parser):
    group = parser.getgroup("tensorplay")
    group.addoption(
        "--tensorplay-junit",
        metavar="FILE",
        default=None,
        help="write the JUnit report of every tensorplay audit the tests ran to FILE",
    )


def pytest_configure(config):
    config.stash[_REPORTS] = []


class Probe:
    """The ``tensorplay`` fixture: audits named after the test, kept for
    ``--tensorplay-junit``."""

    def __init__(self, nodeid, reports):
        self._nodeid = nodeid
        # A node id is the test file's path from the root directory, then `::` and the test.
        self._test_file = nodeid.split("::", 1)[0]
        # (report, the file its JUnit cases link: None for the report's own paths)
        self._reports = reports

    def audit(self, obj, label=None, **options):
        """``tensorplay.audit``, labelled with the test's id unless ``label`` is given."""
        import tensorplay

        report = tensorplay.audit(obj, label=label or self._nodeid, **options)
        self._reports.append((report, self._test_file))
        return report

    def audit_file(self, path, **options):
        """``tensorplay.audit_file``."""
        import tensorplay

        report = tensorplay.audit_file(path, **options)
        self._reports.append((report, None))
        return report

    def assert_passes(self, obj, **options):
        """``tensorplay.testing.assert_passes`` over this fixture's audit."""
        from tensorplay.testing import assert_passes

        report = obj if isinstance(obj, _report_type()) else self.audit(obj, **options)
        return assert_passes(report)


def _report_type():
    from tensorplay import Report

    return Report


@pytest.fixture
def tensorplay(request):
    """Audits live models and files with tensorplay's rules inside a test."""
    return Probe(request.node.nodeid, request.config.stash[_REPORTS])


def pytest_sessionfinish(session):
    path = session.config.getoption("tensorplay_junit")
    if path is None:
        return
    from tensorplay._report import combined

    audits = session.config.stash[_REPORTS]
    files = [test_file for report, test_file in audits for _ in report.files]
    combined([report for report, _ in audits])._native.write_junit(path, files)
