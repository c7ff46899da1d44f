"""Which module serves each marker ``engine`` value; engines are imported on first use.

Modules are named by string and imported with `importlib`, so collection
never pays for an engine it does not run, and this module imports no engine:
`base` (which every engine imports) can ask it for one without a circle.
"""

from __future__ import annotations

import importlib
from typing import Any

from .server_spec import DEFAULT_ENGINE  # noqa: F401 - re-exported

_PACKAGE = __name__.rsplit(".", 1)[0]
# Marker value -> the module that holds its `ENGINE` (".name": a module of this package).
ENGINE_MODULES = {"vllm": ".vllm", "sglang": ".sglang", "trtllm": ".trtllm", "llamacpp": ".llamacpp"}


def register_engine(name: str, module: str) -> None:
    """Make `name` a marker's `engine` value, served by the `ENGINE` (a `base.Engine`) of `module`, an
    importable dotted path: an engine of one's own is one module and this call (in a conftest.py, say)."""
    if not name or not isinstance(name, str):
        raise ValueError(f"an engine name must be a non-empty string, got {name!r}")
    ENGINE_MODULES[name] = module


def engine_named(name: str) -> Any:
    """The engine (a `base.Engine`) for a marker's `engine` value; ValueError listing the known ones otherwise."""
    if name not in ENGINE_MODULES:
        raise ValueError(f"unknown engine {name!r}; known engines: {', '.join(ENGINE_MODULES)}")
    module = importlib.import_module(ENGINE_MODULES[name], package=_PACKAGE)
    engine = getattr(module, "ENGINE", None)
    base = importlib.import_module(".base", package=_PACKAGE)
    if not isinstance(engine, base.Engine):
        raise ValueError(f"engine {name!r}: module {module.__name__} has no ENGINE that is an engines.base.Engine")
    return engine
