"""The engines a test can choose with ``@pytest.mark.specdec(engine=...)``: one module each.

`engine_named` returns an engine's `base.Engine`; modules are imported on
first use, so collection never pays for an engine it does not run.
"""

from __future__ import annotations

import importlib

from .base import Engine, EngineConfigError, LaunchRequest

DEFAULT_ENGINE = "vllm"
# Marker value -> module in this package.
ENGINE_MODULES = {"vllm": "vllm", "sglang": "sglang", "trtllm": "trtllm", "llamacpp": "llamacpp"}

__all__ = ["DEFAULT_ENGINE", "ENGINE_MODULES", "Engine", "EngineConfigError", "LaunchRequest", "engine_named"]


def engine_named(name: str) -> Engine:
    """The engine for a marker's `engine` value; ValueError listing the known ones otherwise."""
    if name not in ENGINE_MODULES:
        raise ValueError(f"unknown engine {name!r}; known engines: {', '.join(ENGINE_MODULES)}")
    return importlib.import_module(f"{__name__}.{ENGINE_MODULES[name]}").ENGINE
