"""Keyword options as the command's flags: the command parses and checks them, so a value it
would refuse is refused here with its message (``UsageError``)."""

import os

# option -> (flag, kind). Kinds: "rules" (a code or name, or a list of them), "bool" (a flag
# given when true), "choice", "path", "size" (bytes as an int, or "24GiB"), "int", "str".
_COMMON = {
    "select": ("--select", "rules"),
    "ignore": ("--ignore", "rules"),
    "fail_on": ("--fail-on", "choice"),
    "config": ("--config", "path"),
    "baseline": ("--baseline", "path"),
    "metadata_only": ("--metadata-only", "bool"),
    "gpu_budget": ("--gpu-budget", "size"),
    "max_memory": ("--max-memory", "size"),
    "expect": ("--expect", "path"),
}

# Options that read files: only the file API has them.
_FILES = {
    "load_to": ("--load-to", "str"),
    "allow_empty": ("--allow-empty", "bool"),
    "timeout_per_file": ("--timeout-per-file", "int"),
    # Chat templates are read from files (GGUF metadata, tokenizer_config.json…), never from
    # live tensors.
    "template_baseline": ("--template-baseline", "path"),
}

FILE_OPTIONS = {**_COMMON, **_FILES}
LIVE_OPTIONS = dict(_COMMON)

_KINDS = {
    "rules": "a rule code or name, or a list of them",
    "bool": "True or False",
    "choice": "'error', 'warning' or 'never'",
    "path": "a path (str or os.PathLike)",
    "size": "a size in bytes (int) or a string such as '24GiB'",
    "int": "an int",
    "str": "a str",
}


def _value(function, name, kind, value):
    def wrong():
        return TypeError(
            f"{function}(): {name}={value!r}: expected {_KINDS[kind]}"
        )

    if kind == "rules":
        items = [value] if isinstance(value, str) else value
        if not isinstance(items, (list, tuple, set, frozenset)) or not all(
            isinstance(item, str) for item in items
        ):
            raise wrong()
        return ",".join(items)
    if kind == "path":
        if not isinstance(value, (str, os.PathLike)):
            raise wrong()
        return os.fspath(value)
    if kind == "size":
        if isinstance(value, bool) or not isinstance(value, (int, str)):
            raise wrong()
        return str(value)
    if kind == "int":
        if isinstance(value, bool) or not isinstance(value, int):
            raise wrong()
        return str(value)
    if not isinstance(value, str):
        raise wrong()
    return value


def flags(function, accepted, options):
    """The command-line flags of ``options`` (keyword arguments of ``function``)."""
    out = []
    for name, value in options.items():
        if name not in accepted:
            raise TypeError(
                f"{function}() got an unexpected keyword argument {name!r}; "
                f"it accepts {', '.join(sorted(accepted))}"
            )
        flag, kind = accepted[name]
        if value is None:
            continue
        if kind == "bool":
            if not isinstance(value, bool):
                raise TypeError(f"{function}(): {name}={value!r}: expected {_KINDS[kind]}")
            if value:
                out.append(flag)
            continue
        out.extend([flag, _value(function, name, kind, value)])
    return out
