# Types of tensorplay.distributed (one audit fanned out over Ray; docs/python.md): the options
# are audit_file's.
import os
from typing import Any, List, Literal, Optional, Sequence, Tuple, Union

from typing_extensions import Unpack

from . import Report, _FileOptions

_Path = Union[str, "os.PathLike[str]"]

ENGINES: Tuple[str, ...]

class MergedReport(Report):
    parts: List[str]
    def __init__(self, parts: Sequence[str], native: Any) -> None: ...

def audit_many(
    paths: Union[_Path, Sequence[_Path]],
    engine: Literal["ray"] = ...,
    parts: Optional[int] = ...,
    **options: Unpack[_FileOptions],
) -> MergedReport: ...
