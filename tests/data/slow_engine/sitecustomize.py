"""An engine made uniformly slower, with nothing the plugin can see: for tests/integration/test_gate_cpu.py.

Python imports `sitecustomize` from the first folder on its path that has one, so every process started
with this folder on PYTHONPATH (the llama.cpp servers a test's pytest session starts) loads it.  When
SPECDEC_TEST_ENGINE_THREADS is set, every ``xllamacpp.Server`` is built with that many threads for
decoding and for prompts, whatever the command line says: on a 2-core box one thread instead of
llama.cpp's default of one per core makes every forward step slower, the reference's and SD's alike, as
an engine build with a new per-step cost would (ggml-org/llama.cpp#25908 shipped one of about 20 ms).
The server's flags, version and /props stay as they were.  Unset, it does nothing.
"""

import importlib.abc
import importlib.util
import os
import sys

_THREADS = int(os.environ.get("SPECDEC_TEST_ENGINE_THREADS") or 0)
_TARGET = "xllamacpp"


class _FewerThreads(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name != _TARGET:
            return None
        sys.meta_path.remove(self)  # patch once; the real finders load the module
        spec = importlib.util.find_spec(name)
        exec_module = spec.loader.exec_module

        def exec_and_patch(module):
            exec_module(module)
            real = module.Server

            def Server(params, *args, **kwargs):
                params.cpuparams.n_threads = _THREADS
                params.cpuparams_batch.n_threads = _THREADS
                return real(params, *args, **kwargs)

            module.Server = Server

        spec.loader.exec_module = exec_and_patch
        return spec


if _THREADS > 0:
    sys.meta_path.insert(0, _FewerThreads())
