"""What scripts/setup leaves in .venv that no other test would notice missing."""

import importlib.util
from pathlib import Path

import pytest


@pytest.mark.parametrize(
    "package, source",
    [("torch", "__init__.py"), ("vllm", "entrypoints/openai/api_server.py"), ("vllm", "v1/engine/core.py")],
)
def test_the_engine_is_byte_compiled(package, source):
    """scripts/setup installs with pip's --no-compile and compiles on every core afterwards.  Without the
    bytecode each vLLM server start (three processes) compiles its imports again wherever
    PYTHONDONTWRITEBYTECODE is set, as it is on some CI machines: seconds per start."""
    spec = importlib.util.find_spec(package)  # a top-level name: found, not imported
    assert spec is not None and spec.submodule_search_locations, f"{package} is not installed: run ./scripts/setup"
    path = Path(spec.submodule_search_locations[0]) / source
    assert path.is_file(), path
    cached = Path(importlib.util.cache_from_source(str(path)))
    assert cached.is_file(), f"{cached} is missing: ./scripts/setup byte-compiles .venv"
