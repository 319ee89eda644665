"""Scripts of `bench/` and `examples/` loaded as modules, so that tests call their `main` (or
their functions) in this process instead of through a subprocess."""

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[1]


def load_script(relative: str, name: str | None = None) -> ModuleType:
    """The script at `ROOT / relative`, executed as module `name` (default: its file's stem) and
    registered in `sys.modules` (dataclasses and pickling by reference look modules up there)."""
    path = ROOT / relative
    spec = importlib.util.spec_from_file_location(name or path.stem, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module
