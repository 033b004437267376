# The extension module (crates/python): the command, the audit and the report renderers.
# Private: the package's modules call it; `tensorplay`'s own names are the API.
import os
from typing import Any, Dict, List, Literal, Mapping, Optional, Sequence, Tuple, Union

_Arg = Union[str, "os.PathLike[str]"]

class Report:
    def render(self, kind: str, color: bool = ..., verbose: bool = ...) -> str: ...
    def write(self, kind: str, path: _Arg) -> None: ...
    def write_junit(self, path: _Arg, files: Sequence[Optional[str]]) -> None: ...
    @property
    def data(self) -> Dict[str, Any]: ...
    @property
    def passed(self) -> bool: ...
    @property
    def layouts(self) -> List[Optional[Dict[str, Any]]]: ...

class Options:
    """An audit's options, checked (`options()` builds them)."""

class LoadedStorage:
    key: str
    nbytes: int
    location: str
    data: Optional[bytearray]

class LoadedTensor:
    name: str
    storage: int
    sizes: List[int]
    strides: List[int]
    storage_offset: int
    dtype: str
    device: str
    requires_grad: bool
    is_parameter: bool
    is_conj: bool
    is_neg: bool

def run(argv: Sequence[_Arg]) -> int: ...
def options(function: str, scope: Literal["files", "live"], options: Mapping[str, Any]) -> Options: ...
def audit(paths: Sequence[_Arg], options: Options, partition: Optional[str] = ...) -> Report: ...
def inspect(path: _Arg, tensor: Optional[str] = ...) -> Tuple[str, str]: ...
def audit_live(
    options: Options,
    label: str,
    storages: Sequence[Tuple[str, str, Any]],
    tensors: Sequence[Tuple[Any, ...]],
) -> Report: ...
def load(
    path: _Arg, options: Options
) -> Tuple[Report, List[LoadedStorage], List[LoadedTensor]]: ...
def write_text(path: _Arg, text: str) -> None: ...
def combine(reports: Sequence[Report]) -> Report: ...
def merge(parts: Sequence[str]) -> Report: ...
def select_rules(selectors: Sequence[str]) -> List[str]: ...
def rules() -> List[Tuple[str, str, List[str]]]: ...
