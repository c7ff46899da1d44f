"""An engine made uniformly slower, with nothing the plugin can see: for tests/integration/test_gate_cpu.py.

Python imports `sitecustomize` from the first folder on its path that has one, so every process started
with this folder on PYTHONPATH (the vLLM servers a test's pytest session starts, and their engine-core
processes) loads it.  When SPECDEC_TEST_FORWARD_DELAY_MS is set, each forward step of vLLM's model
runner (`GPUModelRunner._model_forward`, which the CPU runner inherits) sleeps that long first: the
reference and SD both pay it on every target step, as an engine build with a new per-step overhead
would (ggml-org/llama.cpp#25908 shipped one of about 20 ms).  Unset, it does nothing.
"""

import importlib.abc
import importlib.util
import os
import sys
import time

_DELAY_S = float(os.environ.get("SPECDEC_TEST_FORWARD_DELAY_MS") or 0) / 1000
_TARGET = "vllm.v1.worker.gpu_model_runner"


class _SlowForward(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name != _TARGET:
            return None
        sys.meta_path.remove(self)  # patch once; the real finders load the module
        spec = importlib.util.find_spec(name)
        exec_module = spec.loader.exec_module

        def exec_and_patch(module):
            exec_module(module)
            runner = module.GPUModelRunner
            forward = runner._model_forward

            def slowed(self, *args, **kwargs):
                time.sleep(_DELAY_S)
                return forward(self, *args, **kwargs)

            runner._model_forward = slowed

        spec.loader.exec_module = exec_and_patch
        return spec


if _DELAY_S > 0:
    sys.meta_path.insert(0, _SlowForward())
