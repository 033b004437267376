"""The probes on live tensors. torch is imported here, and only when a probe is called: the
command and the file API never import it."""

import gc
import html
from collections.abc import Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import List, Optional, Tuple

from ._report import Report
from ._errors import Error

ACCEPTED = "a torch.Tensor, a dict of tensors (a state_dict) or a torch.nn.Module"


def _torch():
    """torch, or None where it is not installed (nothing can then be a tensor)."""
    try:
        import torch
    except ImportError:
        return None
    return torch


def _is_tensor(torch, obj):
    return torch is not None and isinstance(obj, torch.Tensor)


def named_tensors(obj, function):
    """``(name, tensor)`` for every tensor of ``obj``: a tensor alone (named ``tensor``); a
    mapping's tensors as ``tensors_in`` names them; a module's parameters and
    buffers by qualified name, in ``state_dict`` order, tied ones under each of their names,
    then its non-persistent buffers. Raises TypeError for anything else."""
    torch = _torch()
    if _is_tensor(torch, obj):
        return [("tensor", obj)]
    if torch is not None and isinstance(obj, torch.nn.Module):
        # keep_vars: the Parameters themselves, with requires_grad and grad history.
        named = [
            (name, value)
            for name, value in obj.state_dict(keep_vars=True).items()
            if isinstance(value, torch.Tensor)
        ]
        seen = {name for name, _ in named}
        named.extend(
            (name, buffer)
            for name, buffer in obj.named_buffers(remove_duplicate=False)
            if name not in seen
        )
        return named
    if isinstance(obj, Mapping):
        named = []
        tensors_in(torch, obj, "", named)
        return named
    raise TypeError(f"{function}() takes {ACCEPTED}, not {type(obj).__name__}")


def tensors_in(torch, value, name, out, _open=None):
    """Appends ``(name, tensor)`` for every tensor in ``value`` to ``out``: a tensor itself
    (``name``, or ``tensor`` when that is empty), a mapping's values by key, a list's or
    tuple's items by index, each level joined to ``name`` with ``.``, as the command names
    what ``torch.save`` wrote of them. Other values (an epoch, a config) hold no storage to
    judge. The walker of ``audit``, ``watch`` and ``fragmentation``, with one rule for cycles:
    a container inside itself is not entered again (its tensors are named on the way in); one
    reached by two paths is named under both."""
    tensor = () if torch is None else torch.Tensor
    if isinstance(value, tensor):
        out.append((name or "tensor", value))
        return
    if isinstance(value, Mapping):
        items = value.items()
    elif isinstance(value, (list, tuple)):
        items = enumerate(value)
    else:
        return
    _open = set() if _open is None else _open
    if id(value) in _open:
        return
    _open.add(id(value))
    for key, item in items:
        # A state dict's keys are already the names: no string built for each.
        child = key if not name and type(key) is str else f"{name}.{key}" if name else str(key)
        if isinstance(item, tensor):
            out.append((child, item))
        else:
            tensors_in(torch, item, child, out, _open)
    _open.discard(id(value))


def _tensor(obj, function):
    torch = _torch()
    if not _is_tensor(torch, obj):
        raise TypeError(f"{function}() takes a torch.Tensor, not {type(obj).__name__}")
    return obj


def _dtype(dtype):
    return str(dtype).replace("torch.", "", 1)


def _storage_key(tensor):
    """What makes two tensors' storages one: the StorageImpl, as torch.save keys them."""
    return tensor.untyped_storage()._cdata


def _strided(tensors):
    """The tensors with a storage to describe (sparse and other layouts have none)."""
    import torch

    strided = torch.strided
    return [(n, t) for n, t in tensors if t.layout is strided]


def _hex(address):
    return f"0x{address:x}"


def _shape(values):
    return "(" + ", ".join(str(v) for v in values) + ("," if len(values) == 1 else "") + ")"


@dataclass
class TensorLayers:
    """One tensor's four layers, read from the live tensor."""

    name: str
    # TensorImpl
    sizes: Tuple[int, ...]
    strides: Tuple[int, ...]
    storage_offset: int
    dtype: str
    device: str
    requires_grad: bool
    is_leaf: bool
    grad_fn: Optional[str]
    is_view: bool
    #: The tensor this one is a view of (its ``_base``): its name when given alongside,
    #: else its sizes and data pointer.
    view_of: Optional[str]
    # Storage
    storage_nbytes: int
    storage_device: str
    storage_data_ptr: int
    #: The tensors given alongside that share the storage, this one included.
    shared_by: List[str] = field(default_factory=list)
    # DataPtr
    data_ptr: int = 0
    data_ptr_device: str = ""
    element_size: int = 0

    @property
    def data_ptr_consistent(self):
        """data_ptr == storage data_ptr + storage_offset × element_size (or both point at
        nothing: a meta tensor, an empty one)."""
        expected = self.storage_data_ptr + self.storage_offset * self.element_size
        return self.data_ptr == expected or (self.data_ptr == 0 and self.storage_data_ptr == 0)

    def lines(self):
        impl = (
            f"sizes {_shape(self.sizes)}  strides {_shape(self.strides)}  "
            f"storage_offset {self.storage_offset}  {self.dtype}  {self.device}"
        )
        grad = (
            f"requires_grad {self.requires_grad}  is_leaf {self.is_leaf}  "
            f"grad_fn {self.grad_fn or 'None'}"
        )
        view = f"view of {self.view_of}" if self.is_view else "not a view"
        consistent = "consistent" if self.data_ptr_consistent else "INCONSISTENT"
        return [
            ("Tensor", f"{self.name}"),
            ("TensorImpl", impl),
            ("", grad),
            ("", view),
            (
                "Storage",
                f"nbytes {self.storage_nbytes}  {self.storage_device}  "
                f"data_ptr {_hex(self.storage_data_ptr)}  shared by: "
                f"{', '.join(self.shared_by) or self.name}",
            ),
            (
                "DataPtr",
                f"{_hex(self.data_ptr)}  {self.data_ptr_device}  (storage data_ptr + "
                f"{self.storage_offset} x {self.element_size} B: {consistent})",
            ),
        ]

    def __str__(self):
        return "\n".join(f"{label:<11} {text}".rstrip() for label, text in self.lines())

    def _repr_html_(self):
        rows = "".join(
            f"<tr><th style='text-align:left'>{html.escape(label)}</th>"
            f"<td style='text-align:left'><code>{html.escape(text)}</code></td></tr>"
            for label, text in self.lines()
        )
        return f"<table>{rows}</table>"


class Layers(list):
    """The four layers of every tensor of a collection (a list of ``TensorLayers``)."""

    def __str__(self):
        return "\n\n".join(str(layers) for layers in self)

    def _repr_html_(self):
        return "".join(layers._repr_html_() for layers in self)


def _layers(name, tensor, names_by_id, sharing):
    storage = tensor.untyped_storage()
    base = tensor._base
    view_of = None
    if base is not None:
        view_of = names_by_id.get(id(base)) or (
            f"a tensor of sizes {_shape(tuple(base.shape))} at {_hex(base.data_ptr())}"
        )
    grad_fn = tensor.grad_fn
    return TensorLayers(
        name=name,
        sizes=tuple(tensor.shape),
        strides=tuple(tensor.stride()),
        storage_offset=tensor.storage_offset(),
        dtype=_dtype(tensor.dtype),
        device=str(tensor.device),
        requires_grad=tensor.requires_grad,
        is_leaf=tensor.is_leaf,
        grad_fn=None if grad_fn is None else type(grad_fn).__name__,
        is_view=tensor._is_view(),
        view_of=view_of,
        storage_nbytes=storage.nbytes(),
        storage_device=str(storage.device),
        storage_data_ptr=storage.data_ptr(),
        shared_by=sharing.get(storage._cdata, []),
        data_ptr=tensor.data_ptr(),
        data_ptr_device=str(storage.device),
        element_size=tensor.element_size(),
    )


def inspect(obj):
    """The four layers of a tensor (``TensorLayers``), or of every tensor of a state_dict or
    module (``Layers``), each storage naming the tensors given that share it."""
    named = _strided(named_tensors(obj, "inspect"))
    names_by_id = {}
    sharing = {}
    for name, tensor in named:
        names_by_id.setdefault(id(tensor), name)
        sharing.setdefault(_storage_key(tensor), []).append(name)
    layers = [_layers(name, t, names_by_id, sharing) for name, t in named]
    if _is_tensor(_torch(), obj):
        return layers[0]
    return Layers(layers)


# Autograd nodes of view operations: a view's grad_fn chain back to its base runs through them.
_VIEW_NODES = (
    "AliasBackward0",
    "AsStridedBackward0",
    "DiagonalBackward0",
    "ExpandBackward0",
    "NarrowBackward0",
    "PermuteBackward0",
    "SelectBackward0",
    "SliceBackward0",
    "SplitBackward0",
    "SqueezeBackward0",
    "SqueezeBackward1",
    "TBackward0",
    "TransposeBackward0",
    "UnbindBackward0",
    "UnfoldBackward0",
    "UnsqueezeBackward0",
    "ViewBackward0",
    "UnsafeViewBackward0",
)


@dataclass
class ViewChain:
    """A view back to its base: ``base`` (the tensor whose storage it views, or None when it
    is not a view), the view operations between them as autograd recorded them (``ops``,
    base first; empty without grad history), and both layouts."""

    tensor: TensorLayers
    base: Optional[TensorLayers]
    ops: List[str]

    def __str__(self):
        if self.base is None:
            return f"{self.tensor.name}: not a view"
        steps = [
            f"base: sizes {_shape(self.base.sizes)} strides {_shape(self.base.strides)} "
            f"offset {self.base.storage_offset} requires_grad {self.base.requires_grad} "
            f"at {_hex(self.base.data_ptr)}"
        ]
        steps.extend(f"  -> {op}" for op in self.ops)
        steps.append(
            f"view: sizes {_shape(self.tensor.sizes)} strides {_shape(self.tensor.strides)} "
            f"offset {self.tensor.storage_offset} at {_hex(self.tensor.data_ptr)}"
        )
        return "\n".join(steps)


def show_view_chain(x):
    """How ``x`` views its base: the base, the view operations autograd recorded, and both
    layouts (PyTorch keeps the root base, so a view of a view reaches the leaf)."""
    x = _tensor(x, "show_view_chain")
    sharing = {}
    layers = _layers("tensor", x, {}, sharing)
    if x._base is None:
        return ViewChain(layers, None, [])
    base = _layers("base", x._base, {}, sharing)
    ops = []
    node = x.grad_fn
    while node is not None and type(node).__name__ in _VIEW_NODES:
        ops.append(type(node).__name__)
        nexts = [n for n, _ in node.next_functions if n is not None]
        node = nexts[0] if nexts else None
    ops.reverse()
    return ViewChain(layers, base, ops)


@dataclass
class SharedStorage:
    """A storage several tensors hold: its data pointer, size and device, and each tensor's
    byte range in it (``(name, start, end)``)."""

    data_ptr: int
    nbytes: int
    device: str
    tensors: List[Tuple[str, int, int]]

    def __str__(self):
        views = ", ".join(f"{n} [{s}, {e})" for n, s, e in self.tensors)
        return f"storage {_hex(self.data_ptr)} ({self.device}, {self.nbytes} B): {views}"


def _byte_range(tensor):
    """The bytes of its storage a tensor reaches, [start, end)."""
    size = tensor.element_size()
    start = tensor.storage_offset() * size
    if tensor.numel() == 0:
        return start, start
    last = sum((n - 1) * s for n, s in zip(tensor.shape, tensor.stride()))
    return start, start + (last + 1) * size


def list_shared_storages(obj):
    """Every storage held by more than one of ``obj``'s tensors (a tied weight, a view kept
    beside its base), with each tensor's byte range."""
    groups = {}
    for name, tensor in _strided(named_tensors(obj, "list_shared_storages")):
        groups.setdefault(_storage_key(tensor), []).append((name, tensor))
    shared = []
    for members in groups.values():
        if len(members) < 2:
            continue
        storage = members[0][1].untyped_storage()
        shared.append(
            SharedStorage(
                data_ptr=storage.data_ptr(),
                nbytes=storage.nbytes(),
                device=str(storage.device),
                tensors=[(name, *_byte_range(t)) for name, t in members],
            )
        )
    return shared


class DataPtrError(Error):
    """A tensor's data pointer is not its storage's plus its offset, or lies outside it."""


def verify_data_ptr_consistency(x):
    """Returns True when ``x.data_ptr() == storage.data_ptr() + storage_offset ×
    element_size`` and its bytes lie inside the storage; raises ``DataPtrError`` otherwise.
    A tensor pointing at nothing (meta, no elements) is consistent."""
    storage = x.untyped_storage()
    offset, size = x.storage_offset(), x.element_size()
    expected = storage.data_ptr() + offset * size
    actual = x.data_ptr()
    if actual == 0 and (storage.data_ptr() == 0 or x.numel() == 0):
        return True
    if actual != expected:
        raise DataPtrError(
            f"data_ptr {_hex(actual)} is not the storage's {_hex(storage.data_ptr())} + "
            f"{offset} x {size} B = {_hex(expected)}"
        )
    start, end = _byte_range(x)
    if end > storage.nbytes():
        raise DataPtrError(
            f"bytes [{start}, {end}) lie past the storage's {storage.nbytes()} bytes"
        )
    return True


def is_safe_view(x):
    """False when ``x`` is a view whose base requires grad or has grad history: an in-place
    operation through it breaks autograd. A tensor that is no view is safe."""
    x = _tensor(x, "is_safe_view")
    base = x._base
    if base is None:
        return True
    return not (base.requires_grad or base.grad_fn is not None)


def recommend_fix(finding):
    """The remedy for a finding (a ``Finding`` or a finding's dict from a JSON report): the
    rule's own advice for these tensors."""
    from ._report import Finding

    if isinstance(finding, Finding):
        data = finding.data
    elif isinstance(finding, Mapping) and "code" in finding:
        data = finding
    else:
        raise TypeError(
            "recommend_fix() takes a Finding or a finding's dict, "
            f"not {type(finding).__name__}"
        )
    return data.get("fix") or f"see `tensorplay explain {data['code']}`"


def _rows(named):
    """The storages and tensors of ``named`` as the extension takes them. A state dict may
    hold 100 000 tensors: what repeats (dtype and device names, whether a tensor type is a
    Parameter) is worked out once."""
    torch = _torch()
    plain, parameter = torch.Tensor, torch.nn.Parameter
    storages = {}
    storage_rows = []
    tensor_rows = []
    dtypes = {}
    devices = {}
    parameter_types = {plain: False}
    for name, tensor in named:
        # Each attribute of a tensor is a call through torch's override checks: read once.
        storage = tensor.untyped_storage()
        dtype, device, kind = tensor.dtype, tensor.device, type(tensor)
        dtype_name = dtypes.get(dtype)
        if dtype_name is None:
            dtype_name = dtypes[dtype] = _dtype(dtype)
        index = storages.get(storage._cdata)
        if index is None:
            index = storages[storage._cdata] = len(storage_rows)
            # Keys in order of first use, as torch.save numbers a state_dict's storages. The
            # extension asks the storage itself for its size, device and (host) address.
            storage_rows.append((str(index), dtype_name, storage))
        device_name = devices.get(device)
        if device_name is None:
            device_name = devices[device] = str(device)
        is_parameter = parameter_types.get(kind)
        if is_parameter is None:
            # issubclass, not isinstance: Parameter's metaclass makes isinstance a Python call.
            is_parameter = parameter_types[kind] = issubclass(kind, parameter)
        if not is_parameter and kind is not plain:
            # A Parameter over a tensor subclass is that subclass, marked `_is_param`.
            is_parameter = getattr(tensor, "_is_param", False)
        tensor_rows.append(
            (
                name,
                index,
                tensor.shape,
                tensor.stride(),
                tensor.storage_offset(),
                dtype_name,
                device_name,
                tensor.requires_grad,
                is_parameter,
                # Host tensors only: the check needs host bytes, and a fake tensor refuses it.
                tensor.data_ptr() if device_name == "cpu" else 0,
                # The object: names of one tensor (a tied Parameter) are one, as in a pickle.
                id(tensor),
            )
        )
    return storage_rows, tensor_rows


@contextmanager
def _bulk():
    """Many small objects made at once (a row per tensor of a 100 000-tensor state dict): the
    cyclic collector would walk every live tensor again each time a generation fills, most of
    the time spent; nothing made here is a cycle, so it waits until the audit is done."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def audit_named(named, label, options):
    """The extension's report of the live audit of ``(name, tensor)`` pairs with ``options``
    (the extension's checked options), shown as ``label``."""
    from . import _tensorplay

    with _bulk():
        storages, tensors = _rows(_strided(named))
        return _tensorplay.audit_live(options, label, storages, tensors)


def audit(obj, label=None, **options):
    """The audit of ``obj``'s live tensors by the command's rules, as a ``Report``: what
    ``tensorplay audit`` reports on a file holding them (``torch.save(obj.state_dict())``),
    with CPU tensors' values read in place. ``label`` names it in the report (default
    ``<live ClassName>``); options are ``audit_file``'s that read no file."""
    from . import _tensorplay

    checked = _tensorplay.options("audit", "live", options)
    with _bulk():
        named = named_tensors(obj, "audit")
        return Report(audit_named(named, label or f"<live {type(obj).__name__}>", checked))
