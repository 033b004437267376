"""tensorplay: audit machine-learning checkpoints without executing them, and probe live
PyTorch tensors with the same rules.

File API (no torch needed): ``audit_file(path, **options)`` → ``Report``,
``inspect_file(path)`` → ``Inspection``.

Live API (torch imported when called): ``inspect``, ``show_view_chain``,
``list_shared_storages``, ``verify_data_ptr_consistency``, ``is_safe_view``,
``recommend_fix``, ``audit``; device checks ``audit_device_consistency`` and
``watch(model)`` around a forward pass; ``validate_state_dict_load(model, source)`` before
loading.

Sampled batches (torch imported when called): ``fragmentation(loader_or_batches,
batches=100)`` → ``FragmentationReport``, TP301's score per batch and its HTML time series.

Loading without executing: ``safe_load(path)``, ``safe_load_state_dict(model, path)``.
Assertions for tests: ``tensorplay.testing.assert_passes``. One audit over a Ray cluster:
``tensorplay.distributed.audit_many(paths, engine="ray")`` (imported on first use). See
docs/python.md.
"""

# Private names: `dir(tensorplay)` shows what is documented (`__all__`), no helper module.
import os as _os

from . import testing
from ._devices import audit_device_consistency, watch
from ._fragmentation import FragmentationReport, fragmentation
from ._live import (
    DataPtrError,
    Layers,
    SharedStorage,
    TensorLayers,
    ViewChain,
    audit,
    inspect,
    is_safe_view,
    list_shared_storages,
    recommend_fix,
    show_view_chain,
    verify_data_ptr_consistency,
)
from ._load import UnsafeCheckpointError, safe_load, safe_load_state_dict
from ._report import Finding, Inspection, Report
from ._validate import LoadCheck, Mismatch, validate_state_dict_load
from ._errors import Error, InternalError, ReadError, UsageError

__all__ = [
    "DataPtrError",
    "Error",
    "Finding",
    "FragmentationReport",
    "Inspection",
    "InternalError",
    "Layers",
    "LoadCheck",
    "Mismatch",
    "ReadError",
    "Report",
    "SharedStorage",
    "TensorLayers",
    "UnsafeCheckpointError",
    "UsageError",
    "ViewChain",
    "audit",
    "audit_device_consistency",
    "audit_file",
    "fragmentation",
    "inspect",
    "inspect_file",
    "is_safe_view",
    "list_shared_storages",
    "recommend_fix",
    "safe_load",
    "safe_load_state_dict",
    "show_view_chain",
    "testing",
    "validate_state_dict_load",
    "verify_data_ptr_consistency",
    "watch",
]


def __getattr__(name):
    # `tensorplay.distributed` (Ray fan-out) on first use: `import tensorplay` stays free of it.
    if name == "distributed":
        import importlib

        return importlib.import_module(".distributed", __name__)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _paths(function, path):
    paths = [path] if isinstance(path, (str, _os.PathLike)) else path
    if not isinstance(paths, (list, tuple)) or not paths or not all(
        isinstance(p, (str, _os.PathLike)) for p in paths
    ):
        raise TypeError(
            f"{function}() takes a path (str or os.PathLike) or a list of them, "
            f"not {type(path).__name__}"
        )
    return [_os.fspath(p) for p in paths]


def audit_file(path, **options):
    """``tensorplay audit PATH``: the report of a checkpoint file, sharded index or directory
    (or a list of them), nothing printed. Options are the command's audit options:
    ``select``, ``ignore``, ``fail_on``, ``config``, ``baseline``, ``metadata_only``,
    ``gpu_budget``, ``max_memory``, ``expect``, ``load_to``, ``allow_empty``,
    ``timeout_per_file``, ``template_baseline`` (``None`` leaves one at its default). Raises
    ``ReadError`` where the command exits 2, ``UsageError`` for a value it refuses,
    ``TypeError`` for an argument of the wrong kind."""
    from . import _tensorplay

    paths = _paths("audit_file", path)
    return Report(_tensorplay.audit(paths, _tensorplay.options("audit_file", "files", options)))


def inspect_file(path, tensor=None):
    """``tensorplay inspect PATH``: the four layers of a checkpoint as the command shows them
    (``repr()``) and as its JSON document (``.data``); ``tensor`` shows only that one."""
    from . import _tensorplay

    if not isinstance(path, (str, _os.PathLike)):
        raise TypeError(f"inspect_file() takes a path (str or os.PathLike), not {type(path).__name__}")
    if tensor is not None and not isinstance(tensor, str):
        raise TypeError(f"inspect_file(): tensor={tensor!r}: expected a tensor name (str)")
    text, document = _tensorplay.inspect(_os.fspath(path), tensor)
    return Inspection(text, document)
