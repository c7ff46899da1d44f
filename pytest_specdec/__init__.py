"""pytest-specdec: regression tests for speculative decoding on real vLLM servers.

Importing this package never imports vllm or torch.
"""

from importlib.metadata import PackageNotFoundError, version

from .metrics import RunMetrics, SpecDecodeCounters
from .models import ModelNameError, ModelUnavailableError
from .patterns import AccessPattern, PatternError, concurrency_sweep
from .pool import ServerPool
from .result import OutputComparison, SpecDecResult
from .runner import Measurements, RunError, SpecDecTest
from .server import LaunchRequest, ServerStartError, VllmServer
from .spec import MarkerError, ServerSpec
from .theory import cost_per_million_tokens, expected_speedup
from .workloads import Prompt, Workload, WorkloadError

try:
    __version__ = version("pytest-specdec")
except PackageNotFoundError:  # running from a source tree that was never installed
    __version__ = "0.0.0+unknown"

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
    "VllmServer",
    "__version__",
]
