"""Assertions for tests: ``assert_passes(obj_or_report)`` fails with the human report."""

from ._report import Report


def _report(obj, **options):
    if isinstance(obj, Report):
        if options:
            raise TypeError("assert_passes(): options apply to an audit, not to a report")
        return obj
    from . import audit

    return audit(obj, **options)


def assert_passes(obj, **options):
    """Audits ``obj`` (a tensor, state_dict or module; a ``Report`` is taken as it is) and
    raises AssertionError, with the human report as its message, unless it passes. Returns
    the report."""
    report = _report(obj, **options)
    if not report.passed:
        raise AssertionError("tensorplay audit failed:\n" + report.human())
    return report
