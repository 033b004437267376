"""tensorplay's exceptions. Their messages are the lines the command prints after ``error:``."""


class Error(Exception):
    """Base of every error tensorplay raises."""


class UsageError(Error, ValueError):
    """An option the command would refuse: an unknown rule, a bad ``fail_on``, a bad size."""


class ReadError(Error):
    """A checkpoint, configuration, baseline or layout could not be read or judged: what the
    command reports with exit code 2."""


class InternalError(Error):
    """A bug in tensorplay (a Rust panic, caught before it reached Python)."""


# Shown as `tensorplay.UsageError` in tracebacks and reprs: where users import them from.
for _error in (Error, UsageError, ReadError, InternalError):
    _error.__module__ = "tensorplay"
del _error
