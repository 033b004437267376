"""Loading a checkpoint without executing it: tensorplay's own readers rebuild its tensors
from the bytes they audited, and torch only allocates and views them. ``pickle`` and
``torch.load`` are never called."""

import os

from ._report import Report
from ._validate import _under
from ._errors import Error, ReadError


class UnsafeCheckpointError(Error):
    """The checkpoint's audit fails at the fail-on level, so it is not loaded. ``report`` is
    the audit; the message is its human report."""

    def __init__(self, report):
        super().__init__(report.human())
        self.report = report


# The one audit option a load refuses: it would read no bytes to build tensors from.
_NOT_FOR_LOAD = "metadata_only"


def _device(torch, path, location, map_location):
    """Where a storage saved on ``location`` goes, as torch.load's ``map_location`` says: None
    (where it was saved), a device or its name (everything there), or a dict from saved
    location to target (others stay where they were saved); checked by the caller."""
    if map_location is None:
        target = location
    elif isinstance(map_location, (str, torch.device)):
        target = map_location
    else:
        target = map_location.get(location, location)
    try:
        return torch.device(target)
    except RuntimeError as err:
        raise ReadError(f"{path}: a storage saved on {location!r}: {err}") from None


def _storage(torch, path, key, nbytes, location, data, device):
    """A uint8 tensor over one storage's bytes on ``device``: ``data`` is a bytearray the
    extension copied them into, which torch views without another copy; None for a storage
    without bytes (meta)."""
    if data is None:
        return torch.empty(nbytes, dtype=torch.uint8, device="meta")
    if nbytes == 0:
        # frombuffer refuses an empty buffer.
        return torch.empty(0, dtype=torch.uint8, device=device)
    # The bytearray is writable: torch views it as it is, without a copy or a warning.
    host = torch.frombuffer(data, dtype=torch.uint8)
    if device.type == "cpu":
        return host
    try:
        return host.to(device)
    except (RuntimeError, AssertionError) as err:
        raise ReadError(
            f"{path}: storage {key} was saved on {location} and cannot be placed on {device}: "
            f"{err}; pass map_location (e.g. 'cpu')"
        ) from None


def _dtype(torch, path, name, dtype):
    found = getattr(torch, dtype, None)
    if not isinstance(found, torch.dtype):
        raise ReadError(f"{path}: '{name}' has dtype {dtype}, which this torch does not have")
    return found


def safe_load(path, map_location=None, **options):
    """The tensors of a checkpoint file, as ``{name: tensor}`` (nested objects flattened to
    dotted names, as ``tensorplay inspect`` names them), read by tensorplay's readers, never by
    ``pickle``: the file is audited first and refused with ``UnsafeCheckpointError`` when the
    audit fails at ``fail_on`` (default ``"error"``). Storages shared between tensors stay
    shared; saved ``nn.Parameter``s come back as parameters, ``requires_grad`` as saved.
    ``map_location`` is torch.load's (None, a device, or a dict of locations). Options are
    ``audit_file``'s (``select``, ``ignore``, ``fail_on``, ``config``, ``baseline``,
    ``max_memory``…). Values that hold no tensor (an epoch, hyperparameters) are not
    rebuilt: nothing a pickle names is ever constructed."""
    tensors, _ = _load(path, map_location, options, "safe_load")
    return tensors


def _load(path, map_location, options, function):
    from . import _tensorplay
    import torch

    if not isinstance(path, (str, os.PathLike)):
        raise TypeError(f"{function}() takes a path (str or os.PathLike), not {type(path).__name__}")
    if not (map_location is None or isinstance(map_location, (str, torch.device, dict))):
        raise TypeError(
            f"{function}(): map_location: expected None, a torch.device, a device name (str) "
            f"or a dict from saved location to device, not {type(map_location).__name__}"
        )
    path = os.fspath(path)
    if _NOT_FOR_LOAD in options:
        raise TypeError(
            f"{function}() got an unexpected keyword argument {_NOT_FOR_LOAD!r}: a load reads "
            "the tensors' bytes"
        )
    checked = _tensorplay.options(function, "files", options)
    raw, loaded_storages, loaded_tensors = _tensorplay.load(path, checked)
    report = Report(raw)
    if not report.passed:
        raise UnsafeCheckpointError(report)
    storages = [
        _storage(
            torch, path, s.key, s.nbytes, s.location, s.data,
            _device(torch, path, s.location, map_location),
        )
        for s in loaded_storages
    ]
    parameter = torch.nn.Parameter
    tensors = {}
    for t in loaded_tensors:
        bytes_ = storages[t.storage]
        tensor = torch.empty(0, dtype=_dtype(torch, path, t.name, t.dtype), device=bytes_.device)
        try:
            tensor.set_(bytes_.untyped_storage(), t.storage_offset, t.sizes, t.strides)
        except RuntimeError as err:
            # A view past its storage (TP107) when the audit was told not to fail on it.
            raise ReadError(f"{path}: '{t.name}': {err}") from None
        if t.is_conj:
            tensor = tensor.conj()
        if t.is_neg:
            tensor = torch._neg_view(tensor)
        if t.is_parameter:
            tensor = parameter(tensor, requires_grad=t.requires_grad)
        elif t.requires_grad:
            tensor.requires_grad_(True)
        tensors[t.name] = tensor
    return tensors, report


def safe_load_state_dict(model, path, map_location=None, prefix="", strict=True, **options):
    """``model.load_state_dict`` from a checkpoint file read by :func:`safe_load` (audited,
    never unpickled). ``prefix`` takes the state dict under it in a larger checkpoint
    (``"model"`` for ``{"model": ..., "optimizer": ...}``, as ``validate_state_dict_load``
    takes it); ``strict`` is load_state_dict's. After the
    load, every parameter and buffer must be on the device it was on before (load_state_dict
    copies into the model's tensors); a model left on several devices raises ``ReadError``.
    Returns the audit ``Report``."""
    import torch

    if not isinstance(model, torch.nn.Module):
        raise TypeError(
            f"safe_load_state_dict() takes a torch.nn.Module, not {type(model).__name__}"
        )
    if not isinstance(prefix, str):
        raise TypeError(f"safe_load_state_dict(): prefix={prefix!r}: expected a str")
    tensors, report = _load(path, map_location, options, "safe_load_state_dict")
    tensors = _under(tensors, prefix)
    if not tensors:
        raise ReadError(f"{os.fspath(path)}: no tensor under '{prefix}'")
    before = {n: t.device for n, t in model.state_dict(keep_vars=True).items()}
    model.load_state_dict(tensors, strict=strict)
    moved = [
        f"'{n}' {before[n]} -> {t.device}"
        for n, t in model.state_dict(keep_vars=True).items()
        if n in before and t.device != before[n]
    ]
    if moved:
        raise ReadError(f"{os.fspath(path)}: loading moved tensors: {', '.join(moved)}")
    return report
