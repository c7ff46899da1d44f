"""The engines a test can choose with ``@pytest.mark.specdec(engine=...)``: one module each.

`engine_named` returns an engine's `base.Engine`; modules are imported on
first use (`registry`), so collection never pays for an engine it does not run.
"""

from __future__ import annotations

from .base import Engine, EngineConfigError, LaunchRequest
from .registry import DEFAULT_ENGINE, ENGINE_MODULES, engine_named, register_engine

__all__ = [
    "DEFAULT_ENGINE",
    "ENGINE_MODULES",
    "Engine",
    "EngineConfigError",
    "LaunchRequest",
    "engine_named",
    "register_engine",
]
