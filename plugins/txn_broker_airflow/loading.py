"""Loading user code given as a dotted path or as a Python file path.

Callables are passed to operators as strings so DAGs serialise and nothing is imported
while a DAG file is parsed.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import sys
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

from .errors import StageDefinitionError


def import_callable(dotted_path: str) -> Callable[..., Any]:
    """``package.module.function`` (or ``package.module:function``) as a callable."""
    module_name, sep, attr = dotted_path.replace(":", ".").rpartition(".")
    if not sep or not module_name:
        raise StageDefinitionError(f"{dotted_path!r} is not a dotted path like 'package.module.function'")
    try:
        module = importlib.import_module(module_name)
    except ImportError as error:
        raise StageDefinitionError(f"cannot import {module_name!r} for {dotted_path!r}: {error}") from None
    func = getattr(module, attr, None)
    if not callable(func):
        raise StageDefinitionError(f"{dotted_path!r}: {module_name} has no callable {attr!r}")
    return func


def load_file_module(path: str | Path) -> ModuleType:
    """Execute the Python file at ``path`` as a module (named after its path, so two files
    with the same name do not collide) and return it. Its directory is put on sys.path
    first, so the file can import its siblings (``spark_apps/schemas.py``)."""
    file = Path(path).resolve()
    if not file.is_file() or file.suffix != ".py":
        raise StageDefinitionError(f"stage file {str(file)!r} is not a .py file")
    parent = str(file.parent)
    if parent not in sys.path:
        sys.path.insert(0, parent)
    name = f"txn_broker_stage_{file.stem}_{hashlib.sha1(str(file).encode()).hexdigest()[:8]}"
    spec = importlib.util.spec_from_file_location(name, file)
    if spec is None or spec.loader is None:
        raise StageDefinitionError(f"cannot load {str(file)!r}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        sys.modules.pop(name, None)
        raise
    return module
