"""A planted regression: a wrapper "environment" whose llama.cpp drafts worse, with no marker changed.

`plant(real_python, directory)` writes ``directory/bin/python``, a script that
runs `real_python` with a ``sitecustomize`` that wraps ``xllamacpp.Server``:
every server it starts gets settings changed before it loads (by default the
n-gram draft cut from the marker's four tokens to three,
``speculative.ngram_simple.size_m = 3``; at 1 or 2 this llama.cpp drafts nothing at all).
The plugin launches it like any other build (``--specdec-build`` or
``--specdec-baseline-from build:PATH``), and nothing in the command line, the
marker or the version it reports says anything changed: what a silent default
change in an engine upgrade looks like.  Used by tests/integration/test_builds_cpu.py,
benchmarks/build_ab.py and the bisect over builds (docs/upgrading.md)::

    python tests/planted_build.py .venv/bin/python /tmp/planted   # prints /tmp/planted/bin/python

`planted_site(directory)` writes only the ``sitecustomize`` folder: with it on
PYTHONPATH and the changes in `PLANTED_CHANGES_ENV`, the build's path stays the
same too (tests/integration/test_gate_cpu.py's slower engine, one thread where
llama.cpp used one per core: ``cpuparams.n_threads = 1``).
"""

from __future__ import annotations

import json
import os
import shlex
import sys
from pathlib import Path

# Dotted attribute paths under xllamacpp's `CommonParams`, set on every server the wrapper starts.
DEFAULT_CHANGES = {"speculative.ngram_simple.size_m": 3}
PLANTED_CHANGES_ENV = "SPECDEC_PLANTED_CHANGES"

_SITECUSTOMIZE = '''
"""Planted by tests/planted_build.py: change xllamacpp's server settings behind the caller's back."""
import json, os

_CHANGES = json.loads(os.environ.get("SPECDEC_PLANTED_CHANGES") or "{}")


def _plant():
    import xllamacpp

    real = xllamacpp.Server

    def Server(params, *args, **kwargs):
        for dotted, value in _CHANGES.items():
            target = params
            *parents, name = dotted.split(".")
            for parent in parents:
                target = getattr(target, parent)
            setattr(target, name, value)
        return real(params, *args, **kwargs)

    xllamacpp.Server = Server


try:
    _plant()
except ImportError:  # a probe that imports no engine: nothing to plant
    pass
'''


def plant(real_python: str | os.PathLike, directory: str | os.PathLike, changes: dict | None = None) -> Path:
    """Write the wrapper into `directory` and return its Python (``directory/bin/python``)."""
    directory = Path(directory)
    site = planted_site(directory)
    python = directory / "bin" / "python"
    python.parent.mkdir(parents=True, exist_ok=True)
    settings = json.dumps(changes or DEFAULT_CHANGES, sort_keys=True)
    python.write_text(
        "#!/bin/sh\n"
        f"{PLANTED_CHANGES_ENV}={shlex.quote(settings)} PYTHONPATH={shlex.quote(str(site))}${{PYTHONPATH:+:$PYTHONPATH}} "
        f'exec {shlex.quote(str(Path(real_python).absolute()))} "$@"\n',
        encoding="utf-8",
    )
    python.chmod(0o755)
    return python


def planted_site(directory: str | os.PathLike) -> Path:
    """Write ``directory/planted-site/sitecustomize.py`` and return the folder (for PYTHONPATH)."""
    site = Path(directory) / "planted-site"
    site.mkdir(parents=True, exist_ok=True)
    (site / "sitecustomize.py").write_text(_SITECUSTOMIZE.lstrip(), encoding="utf-8")
    return site


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit("usage: python tests/planted_build.py REAL_PYTHON DIRECTORY")
    print(plant(sys.argv[1], sys.argv[2]))
