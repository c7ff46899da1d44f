"""pytest-specdec: regression tests for speculative decoding on real vLLM servers.

Importing this package never imports vllm or torch.
"""

from importlib.metadata import PackageNotFoundError, version

from .metrics import SpecDecodeCounters
from .models import ModelNameError, ModelUnavailableError
from .pool import ServerPool
from .runner import SpecDecTest
from .server import LaunchRequest, ServerStartError, VllmServer
from .spec import MarkerError, ServerSpec

try:
    __version__ = version("pytest-specdec")
except PackageNotFoundError:  # running from a source tree that was never installed
    __version__ = "0.0.0+unknown"

__all__ = [
    "LaunchRequest",
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
