"""``validate_state_dict_load``: whether ``model.load_state_dict(source)`` would load, judged
before loading. A file is read by the command's non-executing readers (its metadata and its
audit), never by torch.load or pickle."""

import os
from collections.abc import Mapping
from typing import Any, NamedTuple

from ._live import _dtype, _torch, audit


class Mismatch(NamedTuple):
    """One field of one tensor that differs: ``(name, field, model, source)``, ``field`` one
    of ``"shape"``, ``"dtype"``, ``"device"``, ``"type"`` (the source's value is no tensor)."""

    name: str
    field: str
    model: Any
    source: Any


class _Entry(NamedTuple):
    shape: Any  # a tuple of ints, or None for a lazy parameter (no shape yet)
    dtype: str
    device: str


def _model_entries(torch, model):
    """The model's state_dict keys as load_state_dict expects them: parameters and persistent
    buffers (``state_dict(keep_vars=True)``, the tensors themselves), plus keys whose value
    is no tensor (``get_extra_state``), mapped to None."""
    entries = {}
    for name, value in model.state_dict(keep_vars=True).items():
        if not isinstance(value, torch.Tensor):
            entries[name] = None
            continue
        # A lazy parameter has no shape until its first forward; torch skips the shape check.
        lazy = torch.nn.parameter.is_lazy(value)
        shape = None if lazy else tuple(value.shape)
        entries[name] = _Entry(shape, _dtype(value.dtype), str(value.device))
    return entries


def _mapping_entries(torch, mapping, prefix, leaves, out):
    """A state_dict's keys, nested mappings joined with ``.`` (as ``audit`` names them);
    a value that is neither a tensor nor a mapping is a key mapped to its type's name. A
    mapping under a name in ``leaves`` (the model's extra state, which may be a dict) is a
    value, not more keys."""
    for key, value in mapping.items():
        name = f"{prefix}{key}"
        if isinstance(value, torch.Tensor):
            out[name] = _Entry(tuple(value.shape), _dtype(value.dtype), str(value.device))
        elif isinstance(value, Mapping) and name not in leaves:
            _mapping_entries(torch, value, f"{name}.", leaves, out)
        else:
            out[name] = type(value).__name__
    return out


def _file_entries(path):
    """The tensors a checkpoint file lists, from its metadata (``inspect_file``)."""
    from . import inspect_file

    return {
        t["name"]: _Entry(tuple(t["shape"]), t["dtype"], t["device"])
        for t in inspect_file(path).data["tensors"]
    }


def _under(entries, prefix):
    """The entries under ``prefix`` (``"model"`` takes ``model.0.weight`` as ``0.weight``)."""
    if not prefix:
        return entries
    head = prefix.rstrip(".") + "."
    return {name[len(head):]: e for name, e in entries.items() if name.startswith(head)}


def _shape(shape):
    return "(" + ", ".join(map(str, shape)) + ("," if len(shape) == 1 else "") + ")"


def _problem(m):
    """What a mismatch means for load_state_dict, in words."""
    if m.field == "shape":
        if m.model == () and len(m.source) == 1 and m.source[0] > 1:
            return (
                f"{m.name}: shape () in the model, {_shape(m.source)} in the source: "
                "load_state_dict keeps only its first element"
            )
        return (
            f"{m.name}: shape {_shape(m.model)} in the model, {_shape(m.source)} in the source: "
            "load_state_dict refuses it (size mismatch)"
        )
    if m.field == "dtype":
        return (
            f"{m.name}: dtype {m.model} in the model, {m.source} in the source: load_state_dict "
            f"casts it to {m.model} as it copies (param.copy_(input))"
        )
    if m.field == "type":
        return (
            f"{m.name}: the source holds a {m.source}, not a tensor: load_state_dict refuses it"
        )
    if m.model == "meta":
        effect = "copying into a meta tensor is a no-op: nothing is loaded (unless assign=True)"
    elif m.source == "meta":
        effect = "a meta tensor has no data to copy: load_state_dict fails"
    else:
        effect = "load_state_dict copies across devices (not counted against ok)"
    return f"{m.name}: device {m.model} in the model, {m.source} in the source: {effect}"


def _counts(m):
    """Whether a mismatch stops the load being ok: all but a device difference between two
    devices holding data, which load_state_dict copies across."""
    return m.field != "device" or "meta" in (m.model, m.source)


class LoadCheck:
    """What ``model.load_state_dict(source, strict)`` would meet.

    ``missing`` (model keys the source lacks), ``unexpected`` (source keys the model lacks),
    ``mismatched`` (``Mismatch`` tuples ``(name, field, model's value, source's value)`` for
    shape, dtype and device), ``report`` (the source's own audit), ``strict``, ``source``
    (the path, or ``<live dict>``), ``ok``, ``problems`` (the lines ``str()`` lists).
    """

    def __init__(self, source, strict, missing, unexpected, mismatched, report):
        self.source = source
        self.strict = strict
        self.missing = missing
        self.unexpected = unexpected
        self.mismatched = mismatched
        self.report = report

    @property
    def ok(self):
        """True when the load would succeed and load what the source holds: no shape, dtype
        or meta-device mismatch, the source's report passed, and (when strict) no missing or
        unexpected key. A dtype difference counts although torch casts it: the model would
        not hold the values the source was saved with."""
        if self.strict and (self.missing or self.unexpected):
            return False
        return self.report.passed and not any(_counts(m) for m in self.mismatched)

    @property
    def problems(self):
        lines = []
        keys_count = "" if self.strict else " (allowed: strict=False)"
        if self.missing:
            lines.append(f"missing{keys_count}: {', '.join(self.missing)}")
        if self.unexpected:
            lines.append(f"unexpected{keys_count}: {', '.join(self.unexpected)}")
        lines.extend(_problem(m) for m in self.mismatched)
        if not self.report.passed:
            codes = ", ".join(self.report.codes)
            lines.append(f"the source's audit failed ({codes}); see .report")
        return lines

    def __str__(self):
        verdict = "ok" if self.ok else "NOT OK"
        head = f"load_state_dict from {self.source} (strict={self.strict}): {verdict}"
        return "\n".join([head, *(f"  {line}" for line in self.problems)])

    def __repr__(self):
        return (
            f"<LoadCheck ok={self.ok} missing={len(self.missing)} "
            f"unexpected={len(self.unexpected)} mismatched={len(self.mismatched)}>"
        )


def validate_state_dict_load(model, state_dict_or_path, strict=True, prefix="", **options):
    """Whether ``model.load_state_dict(source, strict=strict)`` would load, without loading.

    ``state_dict_or_path`` is a state_dict (a mapping of tensors; nested mappings are named
    ``outer.inner``) or the path of one checkpoint file, read by ``inspect_file`` (metadata,
    never executed) and audited by ``audit_file(path, **options)``; a live state_dict is
    audited by ``audit(state_dict, **options)``. ``prefix`` takes the source's keys under it
    (``"model"`` for ``{"model": state_dict, "optimizer": ...}``, ``"module"`` for a DDP
    state_dict); the report covers the whole source.

    The model's keys are ``model.state_dict()``'s (persistent buffers included, non-persistent
    ones not, as torch loads them). Shape differences are what torch refuses (a 0-dim
    parameter accepts a 1-element vector, as torch does; a lazy parameter any shape). dtype
    differences count against ``ok`` though torch casts them. Device differences are listed
    but do not count, since load_state_dict copies across devices, except to or from ``meta``
    (a no-op or a failure). A file's listing holds tensors only, so the model's non-tensor
    extra state is compared with live state_dicts only. Returns a ``LoadCheck``.
    """
    torch = _torch()
    if torch is None or not isinstance(model, torch.nn.Module):
        raise TypeError(
            "validate_state_dict_load() takes a torch.nn.Module as model, "
            f"not {type(model).__name__}"
        )
    if not isinstance(strict, bool):
        raise TypeError(f"validate_state_dict_load(): strict={strict!r}: expected True or False")
    if not isinstance(prefix, str):
        raise TypeError(f"validate_state_dict_load(): prefix={prefix!r}: expected a str")
    source = state_dict_or_path
    is_path = isinstance(source, (str, os.PathLike))
    if not is_path and not isinstance(source, Mapping):
        raise TypeError(
            "validate_state_dict_load() takes a state_dict (a mapping of tensors) or a "
            f"checkpoint's path (str or os.PathLike), not {type(source).__name__}"
        )
    # The options' errors name this function, before anything is read.
    from . import _tensorplay

    _tensorplay.options("validate_state_dict_load", "files" if is_path else "live", options)

    expected = _model_entries(torch, model)
    if is_path:
        from . import audit_file

        found = _under(_file_entries(source), prefix)
        report = audit_file(source, **options)
        label = os.fspath(source)
        # Extra state (no tensor) cannot be seen in a file's tensor listing.
        expected = {k: e for k, e in expected.items() if e is not None}
    else:
        head = prefix.rstrip(".") + "." if prefix else ""
        leaves = {head + name for name, entry in expected.items() if entry is None}
        found = _under(_mapping_entries(torch, source, "", leaves, {}), prefix)
        report = audit(source, **options)
        label = f"<live {type(source).__name__}>"

    missing = [name for name in expected if name not in found]
    unexpected = [name for name in found if name not in expected]
    mismatched = []
    for name, want in expected.items():
        have = found.get(name)
        if want is None or have is None:
            continue
        if isinstance(have, str):
            mismatched.append(Mismatch(name, "type", "Tensor", have))
            continue
        mismatched.extend(_differences(name, want, have))
    return LoadCheck(label, strict, missing, unexpected, mismatched, report)


def _differences(name, want, have):
    out = []
    shape = have.shape
    # torch loads a 1-element vector into a 0-dim parameter (checkpoints of torch 0.3).
    if want.shape == () and shape == (1,):
        shape = ()
    if want.shape is not None and shape != want.shape:
        out.append(Mismatch(name, "shape", want.shape, have.shape))
    if have.dtype != want.dtype:
        out.append(Mismatch(name, "dtype", want.dtype, have.dtype))
    if have.device != want.device:
        out.append(Mismatch(name, "device", want.device, have.device))
    return out
