"""pytest-specdec: regression tests for speculative decoding on real vLLM servers.

Importing this package never imports vllm or torch.
"""

from . import _compat

from .engines.counters import SpecDecodeCounters
from .analysis.metrics import RunMetrics
from .serving.models import ModelNameError, ModelUnavailableError
from .load.patterns import AccessPattern, PatternError, concurrency_sweep
from .serving.pool import ServerPool
from .measure.result import OutputComparison, SpecDecResult
from .measure.measurements import Measurements, RunError
from .measure.specdec_test import SpecDecTest
from .serving.server import LaunchRequest, ManagedServer, ServerStartError
from .config.spec import MarkerError, ServerSpec
from .analysis.theory import cost_per_million_tokens, expected_speedup
from .load.workloads import Prompt, Workload, WorkloadError

from .version import __version__

_compat.install()  # old flat module paths keep importing, with a warning

__all__ = [
    "AccessPattern",
    "LaunchRequest",
    "Measurements",
    "OutputComparison",
    "PatternError",
    "Prompt",
    "RunError",
    "RunMetrics",
    "SpecDecResult",
    "Workload",
    "WorkloadError",
    "concurrency_sweep",
    "cost_per_million_tokens",
    "expected_speedup",
    "MarkerError",
    "ModelNameError",
    "ModelUnavailableError",
    "ServerPool",
    "ServerSpec",
    "ServerStartError",
    "SpecDecTest",
    "SpecDecodeCounters",
    "ManagedServer",
    "__version__",
]


def __getattr__(name: str):
    if name == "VllmServer":  # the old name, with the warning serving.server gives
        from .serving import server

        return server.VllmServer
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
