"""Another version of one of the package's modules, loaded beside the working tree's, for a benchmark that measures
both (a revision before a change, or a file given)."""

from __future__ import annotations

import importlib.util
import tempfile
from pathlib import Path
from types import ModuleType


def module_from_text(text: str, name: str) -> ModuleType:
    """Execute ``text`` as a module named ``name`` (a name inside the package, e.g.
    ``triton_dist_tune.group.mpi_ref``, resolves its relative imports against the working tree's package)."""
    path = Path(tempfile.mkdtemp()) / f"{name.rsplit('.', 1)[-1]}.py"
    path.write_text(text)
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
