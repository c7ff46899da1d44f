"""A planted fault: a vLLM build whose drafted tokens bypass the grammar, with nothing else changed.

`planted_grammar_site(directory)` writes a ``sitecustomize`` folder; a vLLM server started with it on
PYTHONPATH patches ``StructuredOutputManager._get_constraint_bounds`` (vllm/v1/structured_output/__init__.py,
0.32) so that from a request's first draft window on, the grammar is said to start *after* the tokens at hand
and the bonus one: the scheduler's ``validate_tokens`` lets every draft through, the bitmask leaves every
position unmasked, and ``accept_tokens`` no longer feeds the grammar.  That is the shape of
vllm-project/vllm#34650 (drafts after a reasoning end were not checked against the grammar), made sticky: a
fault that bypassed only the draft positions left the 135M model's JSON valid on all six bundled prompts here
(its unconstrained continuation at those steps happened to be grammatical).  A request that never drafts is
constrained as before, so a server without SD (the reference) is untouched by construction and stays valid:
the plant can sit on both sides' PYTHONPATH.  Used by tests/integration/test_structured_cpu.py.

The import hook patches the module when vLLM imports it (importing vLLM from sitecustomize would slow down
every Python process the test starts, the tokenizer probes included).
"""

from __future__ import annotations

import os
from pathlib import Path

_SITECUSTOMIZE = '''
"""Planted by tests/support/planted_grammar.py: drafted tokens bypass the grammar (vLLM's structured outputs)."""
import importlib.abc
import importlib.machinery
import sys

_TARGET = "vllm.v1.structured_output"


def _patch(module):
    manager = module.StructuredOutputManager
    real = manager._get_constraint_bounds

    def _get_constraint_bounds(self, request, spec_tokens, spec_tokens_committed=False):
        if len(spec_tokens) and not spec_tokens_committed:
            request._planted_grammar_bypass = True  # its first draft window: from here on, nothing is checked
        if getattr(request, "_planted_grammar_bypass", False):
            past = len(spec_tokens) + 1  # "the grammar starts after these tokens and the bonus one"
            return module.ConstraintBounds(past, past)
        return real(self, request, spec_tokens, spec_tokens_committed)

    manager._get_constraint_bounds = _get_constraint_bounds


class _Finder(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name != _TARGET:
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is None or spec.loader is None:
            return spec
        loader = spec.loader
        run = loader.exec_module

        def exec_module(module):
            run(module)
            _patch(module)

        loader.exec_module = exec_module
        return spec


sys.meta_path.insert(0, _Finder())
'''


def planted_grammar_site(directory: str | os.PathLike) -> Path:
    """Write ``directory/grammar-bypass-site/sitecustomize.py`` and return the folder (for PYTHONPATH)."""
    site = Path(directory) / "grammar-bypass-site"
    site.mkdir(parents=True, exist_ok=True)
    (site / "sitecustomize.py").write_text(_SITECUSTOMIZE.lstrip(), encoding="utf-8")
    return site
