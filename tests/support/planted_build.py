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

    python tests/support/planted_build.py .venv/bin/python /tmp/planted   # prints /tmp/planted/bin/python

`plant(..., sd_changes=...)` changes only a server started with speculation
configured (any ``speculative.types`` but NONE; the flat ``speculative.type``
of xllamacpp 2026.4): the SD server, never the reference.  `SD_SLOWER` makes
the SD server slower with its outputs and acceptance unchanged under greedy
decoding (tests/integration/test_builds_sequential_cpu.py): its sampler chain
becomes ``top_p;temperature`` with ``top_k = 0`` and ``min_keep = 1000``, so
every sampled position sorts the whole vocabulary and carries a thousand
candidates on, and the temperature-0 pass still picks the most likely token.
Measured by benchmarks/planted_sd_slowdown.py (2026-11-28, a 2-core AMD EPYC
KVM box, every server ``-t 1``, n-gram k=4 on three 96-token code edits, 48
tokens out each, one at a time, 6 rounds interleaved): SD output tok/s x0.836
(median; 0.777-0.849 over the rounds), the reference's x0.996 (0.956-1.024),
the speedup -16.7% (-15.6% to -18.8%), SD tokens and drafts the same in every
round.  The cost is per sampled token, so it is a smaller share where prefill
is a larger one: the same chain with ``min_keep`` over the whole vocabulary
cost SD 15% on 192-token prompts and 25-27% on these.  What else was tried:
one batch thread on the SD server (``cpuparams_batch.n_threads = 1``, where
llama.cpp runs one per core) cost 35% in a quiet round, but a busy neighbour on
this box made any two-thread server 10-40 times slower at random; ``top_k = 0``
alone cost 8%.  Command line: ``python tests/support/planted_build.py REAL_PYTHON
DIRECTORY --sd-slower``.

`planted_site(directory)` writes only the ``sitecustomize`` folder: with it on
PYTHONPATH and the changes in `PLANTED_CHANGES_ENV` (and `PLANTED_SD_CHANGES_ENV`),
the build's path stays the same too (tests/integration/test_gate_cpu.py's slower engine, one thread where
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
# The same, set only on a server started with speculation configured (the SD server, never the reference).
PLANTED_SD_CHANGES_ENV = "SPECDEC_PLANTED_SD_CHANGES"
# The SD server slower, its tokens and drafts the same (module docstring): its sampler sorts the whole
# vocabulary through top-p and keeps a thousand candidates where it kept a handful; the temperature-0 pass
# at the end still picks the most likely token, as the real build's chain does.
SD_SLOWER = {"sampling.top_k": 0, "sampling.min_keep": 1000, "sampling.samplers": "top_p;temperature"}
# The SD server slower by far more than a 10% gate's zone on any box: that sampler, and a physical batch of one
# token (`n_ubatch`, 512 by default), so the SD server prefills its prompts and verifies its drafts a token a
# step, greedy tokens and drafts still the same.  The sampler alone cost SD 10-19% of its speedup on a 2-core
# Intel box, 17% on an AMD one: too near a 10% tolerance for a test that must fail the build.
SD_MUCH_SLOWER = {**SD_SLOWER, "n_ubatch": 1}

_SITECUSTOMIZE = '''
"""Planted by tests/support/planted_build.py: change xllamacpp's server settings behind the caller's back."""
import json, os

_CHANGES = json.loads(os.environ.get("SPECDEC_PLANTED_CHANGES") or "{}")
_SD_CHANGES = json.loads(os.environ.get("SPECDEC_PLANTED_SD_CHANGES") or "{}")


def _speculates(params):
    """Whether the server drafts: any speculative type but NONE (nested layout), or a flat `type` not NONE."""
    speculative = params.speculative
    kinds = getattr(speculative, "types", None)
    if kinds is None:  # the flat layout (xllamacpp 2026.4): one type
        kinds = [getattr(speculative, "type", 0)]
    return any(int(kind) != 0 for kind in kinds)


def _apply(params, changes):
    for dotted, value in changes.items():
        target = params
        *parents, name = dotted.split(".")
        for parent in parents:
            target = getattr(target, parent)
        setattr(target, name, value)


def _plant():
    import xllamacpp

    real = xllamacpp.Server

    def Server(params, *args, **kwargs):
        _apply(params, _CHANGES)
        if _SD_CHANGES and _speculates(params):
            _apply(params, _SD_CHANGES)
        return real(params, *args, **kwargs)

    xllamacpp.Server = Server


try:
    _plant()
except ImportError:  # a probe that imports no engine: nothing to plant
    pass
'''


def plant(
    real_python: str | os.PathLike,
    directory: str | os.PathLike,
    changes: dict | None = None,
    sd_changes: dict | None = None,
) -> Path:
    """Write the wrapper into `directory` and return its Python (``directory/bin/python``).

    `changes` are set on every server (`DEFAULT_CHANGES` when neither is given), `sd_changes` only on a
    server that drafts (`SD_SLOWER`: the SD server slower, its outputs and acceptance the same)."""
    directory = Path(directory)
    site = planted_site(directory)
    python = directory / "bin" / "python"
    python.parent.mkdir(parents=True, exist_ok=True)
    if not changes:
        changes = {} if sd_changes else DEFAULT_CHANGES
    settings = json.dumps(changes, sort_keys=True)
    sd_settings = json.dumps(sd_changes or {}, sort_keys=True)
    python.write_text(
        "#!/bin/sh\n"
        f"{PLANTED_CHANGES_ENV}={shlex.quote(settings)} {PLANTED_SD_CHANGES_ENV}={shlex.quote(sd_settings)} "
        f"PYTHONPATH={shlex.quote(str(site))}${{PYTHONPATH:+:$PYTHONPATH}} "
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
    if len(sys.argv) not in (3, 4) or sys.argv[3:] not in ([], ["--sd-slower"]):
        sys.exit("usage: python tests/support/planted_build.py REAL_PYTHON DIRECTORY [--sd-slower]")
    print(plant(sys.argv[1], sys.argv[2], sd_changes=SD_SLOWER if sys.argv[3:] else None))
