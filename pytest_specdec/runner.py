"""What the ``specdec`` fixture hands a test: its server configuration and servers.

A plain object over a `ServerPool`, usable from a script as well as a test.
"""

from __future__ import annotations

from .pool import ServerPool
from .server import VllmServer
from .spec import ServerSpec


class SpecDecTest:
    """One test's speculative configuration and the no-SD reference beside it."""

    def __init__(self, spec: ServerSpec, pool: ServerPool):
        self.spec = spec
        self.pool = pool

    @property
    def reference_spec(self) -> ServerSpec:
        return self.spec.reference()

    def server(self) -> VllmServer:
        """The server with the test's speculative config, started if needed."""
        return self.pool.get(self.spec)

    def reference_server(self) -> VllmServer:
        """The same target and flags without speculation."""
        return self.pool.get(self.reference_spec)

    def __repr__(self) -> str:
        return f"<SpecDecTest {self.spec.label()}>"
