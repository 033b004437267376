from typing import Any

from . import Report

def assert_passes(obj: Any, **options: Any) -> Report: ...
