"""The engines a test can choose with ``@pytest.mark.specdec(engine=...)``: one module each.

`engine_named` returns an engine's `base.Engine`; modules are imported on
first use, so collection never pays for an engine it does not run.
"""

from __future__ import annotations

import importlib

from .base import Engine, EngineConfigError, LaunchRequest

DEFAULT_ENGINE = "vllm"
# Marker value -> the module that holds its `ENGINE` (".name": a module of this package).
ENGINE_MODULES = {"vllm": ".vllm", "sglang": ".sglang", "trtllm": ".trtllm", "llamacpp": ".llamacpp"}

__all__ = ["DEFAULT_ENGINE", "ENGINE_MODULES", "Engine", "EngineConfigError", "LaunchRequest", "engine_named",
           "register_engine"]


def register_engine(name: str, module: str) -> None:
    """Make `name` a marker's `engine` value, served by the `ENGINE` (a `base.Engine`) of `module`, an
    importable dotted path: an engine of one's own is one module and this call (in a conftest.py, say)."""
    if not name or not isinstance(name, str):
        raise ValueError(f"an engine name must be a non-empty string, got {name!r}")
    ENGINE_MODULES[name] = module


def engine_named(name: str) -> Engine:
    """The engine for a marker's `engine` value; ValueError listing the known ones otherwise."""
    if name not in ENGINE_MODULES:
        raise ValueError(f"unknown engine {name!r}; known engines: {', '.join(ENGINE_MODULES)}")
    module = importlib.import_module(ENGINE_MODULES[name], package=__name__)
    engine = getattr(module, "ENGINE", None)
    if not isinstance(engine, Engine):
        raise ValueError(f"engine {name!r}: module {module.__name__} has no ENGINE that is an engines.base.Engine")
    return engine
