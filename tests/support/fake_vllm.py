"""A Python whose ``vllm`` is a few source files and no more: for probes that read vLLM's source on disk and must
never import it."""

import sys
from pathlib import Path


def python_with_vllm_files(directory: Path, name: str, files: dict[str, str]) -> str:
    """A `python` (a shell script) whose ``vllm`` package holds `files` ({path under vllm/: text}); importing
    ``vllm`` itself exits with an error, so a probe that imports it fails."""
    root = directory / name / "site"
    (root / "vllm").mkdir(parents=True)
    (root / "vllm" / "__init__.py").write_text("raise SystemExit('the probe must not import vllm')\n")
    for relative, text in files.items():
        path = root / "vllm" / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    python = directory / f"python-{name}"
    python.write_text(f'#!/bin/sh\nPYTHONPATH={root} exec {sys.executable} "$@"\n')
    python.chmod(0o755)
    return str(python)
