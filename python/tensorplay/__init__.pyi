# Types of the public API (docs/python.md): what editors and type checkers see. The options
# are the keyword arguments each function documents; `select`/`ignore` take a code, a code
# prefix or a rule name, or several.
import os
from typing import (
    Any,
    Collection,
    Dict,
    Iterable,
    List,
    Literal,
    Mapping,
    NamedTuple,
    Optional,
    Sequence,
    Tuple,
    Union,
)

from typing_extensions import TypedDict, Unpack

from . import testing as testing

_Path = Union[str, "os.PathLike[str]"]
_Rules = Union[str, Collection[str]]
_Size = Union[int, str]
_FailOn = Literal["error", "warning", "never"]

class _Options(TypedDict, total=False):
    """The options every audit takes (None: the default)."""

    select: Optional[_Rules]
    ignore: Optional[_Rules]
    fail_on: Optional[_FailOn]
    config: Optional[_Path]
    baseline: Optional[_Path]
    metadata_only: bool
    gpu_budget: Optional[_Size]
    max_memory: Optional[_Size]
    expect: Optional[_Path]

class _FileOptions(_Options, total=False):
    """And those that read files."""

    load_to: Optional[str]
    allow_empty: bool
    timeout_per_file: Optional[int]
    template_baseline: Optional[_Path]

class _BatchOptions(TypedDict, total=False):
    config: Optional[_Path]
    gpu_budget: Optional[_Size]

class Error(Exception): ...
class UsageError(Error, ValueError): ...
class ReadError(Error): ...
class InternalError(Error): ...
class DataPtrError(Error): ...

class Finding:
    data: Dict[str, Any]
    file: str
    def __init__(self, data: Dict[str, Any], file: str) -> None: ...
    @property
    def code(self) -> str: ...
    @property
    def rule(self) -> str: ...
    @property
    def severity(self) -> str: ...
    @property
    def message(self) -> str: ...
    @property
    def tensors(self) -> List[str]: ...
    @property
    def tensor(self) -> Optional[str]: ...
    @property
    def storage(self) -> Optional[int]: ...
    @property
    def fix(self) -> str: ...
    def __getitem__(self, key: str) -> Any: ...

class Report:
    @property
    def data(self) -> Dict[str, Any]: ...
    @property
    def passed(self) -> bool: ...
    @property
    def exit_code(self) -> int: ...
    @property
    def summary(self) -> Dict[str, Any]: ...
    @property
    def files(self) -> List[Dict[str, Any]]: ...
    @property
    def findings(self) -> List[Finding]: ...
    @property
    def codes(self) -> List[str]: ...
    def to_json(self) -> str: ...
    def human(self, color: bool = ..., verbose: bool = ...) -> str: ...
    def write_json(self, path: _Path) -> None: ...
    def write_junit(self, path: _Path) -> None: ...
    def write_sarif(self, path: _Path) -> None: ...
    def write_html(self, path: _Path) -> None: ...
    def write_gitlab_codequality(self, path: _Path) -> None: ...

class Inspection:
    data: Dict[str, Any]
    @property
    def tensors(self) -> List[Dict[str, Any]]: ...
    @property
    def storages(self) -> List[Dict[str, Any]]: ...
    def to_json(self) -> str: ...

def audit_file(
    path: Union[_Path, Sequence[_Path]],
    **options: Unpack[_FileOptions],
) -> Report: ...
def inspect_file(path: _Path, tensor: Optional[str] = ...) -> Inspection: ...

class TensorLayers:
    name: str
    sizes: Tuple[int, ...]
    strides: Tuple[int, ...]
    storage_offset: int
    dtype: str
    device: str
    requires_grad: bool
    is_leaf: bool
    grad_fn: Optional[str]
    is_view: bool
    view_of: Optional[str]
    storage_nbytes: int
    storage_device: str
    storage_data_ptr: int
    shared_by: List[str]
    data_ptr: int
    data_ptr_device: str
    element_size: int
    @property
    def data_ptr_consistent(self) -> bool: ...
    def lines(self) -> List[str]: ...

class Layers(List[TensorLayers]): ...

class ViewChain:
    tensor: TensorLayers
    base: Optional[TensorLayers]
    ops: List[str]

class SharedStorage:
    data_ptr: int
    nbytes: int
    device: str
    tensors: List[Tuple[str, int, int]]

# The live API takes a tensor, a state_dict (a mapping of tensors, nested) or a module;
# torch is imported when it is called.
def inspect(obj: Any) -> Layers: ...
def show_view_chain(x: Any) -> ViewChain: ...
def list_shared_storages(obj: Any) -> List[SharedStorage]: ...
def verify_data_ptr_consistency(x: Any) -> bool: ...
def is_safe_view(x: Any) -> bool: ...
def recommend_fix(finding: Union[Finding, Dict[str, Any]]) -> str: ...
def audit(
    obj: Any,
    label: Optional[str] = ...,
    **options: Unpack[_Options],
) -> Report: ...
def audit_device_consistency(
    obj: Any,
    label: Optional[str] = ...,
    **options: Unpack[_Options],
) -> Report: ...

class watch:
    model: Any
    label: str
    strict: bool
    report: Optional[Report]
    def __init__(
        self,
        model: Any,
        label: Optional[str] = ...,
        strict: bool = ...,
        **options: Unpack[_Options],
    ) -> None: ...
    @property
    def passed(self) -> bool: ...
    def __enter__(self) -> "watch": ...
    def __exit__(self, *exc: Any) -> Optional[bool]: ...

class Mismatch(NamedTuple):
    name: str
    field: str
    model: Any
    source: Any

class LoadCheck:
    source: str
    strict: bool
    missing: List[str]
    unexpected: List[str]
    mismatched: List[Mismatch]
    report: Optional[Report]
    @property
    def ok(self) -> bool: ...
    @property
    def problems(self) -> List[str]: ...

def validate_state_dict_load(
    model: Any,
    state_dict_or_path: Union[Mapping[str, Any], _Path],
    strict: bool = ...,
    prefix: str = ...,
    **options: Any,
) -> LoadCheck: ...

class UnsafeCheckpointError(Error):
    report: Report
    def __init__(self, report: Report) -> None: ...

def safe_load(path: _Path, map_location: Any = ..., **options: Any) -> Dict[str, Any]: ...
def safe_load_state_dict(
    model: Any,
    path: _Path,
    map_location: Any = ...,
    prefix: str = ...,
    strict: bool = ...,
    **options: Any,
) -> Any: ...

class FragmentationSample:
    index: int
    score: Optional[float]
    above_threshold: bool
    storages: int
    tensors: int
    requested_bytes: int
    allocated_bytes: int
    reserved_bytes: int
    segments: int
    fragmentation: float
    fits_budget: Optional[bool]

class FragmentationReport:
    samples: List[FragmentationSample]
    threshold: float
    @property
    def scored(self) -> List[FragmentationSample]: ...
    @property
    def above_threshold(self) -> List[FragmentationSample]: ...
    @property
    def passed(self) -> bool: ...
    @property
    def worst(self) -> Optional[FragmentationSample]: ...
    @property
    def mean_score(self) -> Optional[float]: ...
    @property
    def data(self) -> Dict[str, Any]: ...
    def to_json(self) -> str: ...
    def to_html(self) -> str: ...
    def write_html(self, path: _Path) -> None: ...

def fragmentation(
    loader_or_batches: Iterable[Any],
    batches: int = ...,
    **options: Unpack[_BatchOptions],
) -> FragmentationReport: ...

__all__: List[str]
