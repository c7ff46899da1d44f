"""A server's /metrics page read again and again over one kept client: what the series sampler reads through.

``httpx.get()`` builds a client for every call, and building one costs tens of ms of CPU (an SSL context
loaded with the CA bundle, even for plain http), most of it with the interpreter's lock held.  The series sampler reads every 0.5 s on a thread of the load client's own process, so each read
held the client's requests back, far enough to push a capacity probe past the client-bound limit and
have it run again (benchmarks/server_series.py measures it; docs/benchmarks.md keeps the figures).  One client
per run pays that once, before the run's first request.
"""

from __future__ import annotations

import threading

import httpx


class MetricsPage:
    """``text()`` reads ``URL/metrics`` over a client made on the first read; ``close()`` closes it."""

    def __init__(self, url: str, timeout_s: float):
        self.url = f"{url.rstrip('/')}/metrics"
        self.timeout_s = timeout_s
        self._client: httpx.Client | None = None
        self._lock = threading.Lock()

    def text(self) -> str:
        with self._lock:
            if self._client is None:
                self._client = httpx.Client(timeout=self.timeout_s)
            client = self._client
        response = client.get(self.url)
        response.raise_for_status()
        return response.text

    def close(self) -> None:
        with self._lock:
            client, self._client = self._client, None
        if client is not None:
            client.close()
