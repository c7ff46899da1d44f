"""Servers the plugin did not start: a deployment that already serves traffic.

``--specdec-endpoint reference=URL --specdec-endpoint speculative=URL`` (or a
marker's ``endpoints={...}``) points a test's two sides at running servers
that speak the OpenAI API: a Kubernetes service, an SGLang or TensorRT-LLM
server.  Nothing is launched or stopped.  SD counters come from the
endpoint's ``/metrics`` when it exposes vLLM's names; when it does not, they
are unavailable (reported as such, never as zero acceptance).
"""

from __future__ import annotations

from typing import Mapping

import httpx

from ..engines.counters import Sample, SpecDecodeCounters, parse_prometheus
from .server import METRICS_TIMEOUT_S, scrape_counters

ROLES = ("reference", "speculative")
CONNECT_TIMEOUT = 5.0  # an endpoint that does not answer fails the test in seconds, not minutes


class EndpointError(RuntimeError):
    """An endpoint that does not answer, or serves another model than the test names."""


def parse_endpoint(value: str) -> tuple[str, str]:
    """``reference=URL`` / ``speculative=URL`` (an argparse ``type=``)."""
    import argparse

    role, sep, url = str(value).partition("=")
    role, url = role.strip(), url.strip()
    if not sep or role not in ROLES:
        raise argparse.ArgumentTypeError(f"expected reference=URL or speculative=URL, got {value!r}")
    try:
        return role, check_url(url)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def check_url(url: str) -> str:
    if not isinstance(url, str) or not url.startswith(("http://", "https://")) or len(url) < 10:
        raise ValueError(f"an endpoint is an http:// or https:// base URL, got {url!r}")
    url = url.rstrip("/")
    return url[: -len("/v1")] if url.endswith("/v1") else url  # the client adds /v1/... itself


def check_endpoints(value) -> tuple[tuple[str, str], ...]:
    """A marker's ``endpoints={"reference": URL, "speculative": URL}``, both roles required."""
    if not isinstance(value, Mapping):
        raise ValueError(f"must be a mapping like {{'reference': URL, 'speculative': URL}}, got {value!r}")
    unknown = sorted(set(value) - set(ROLES))
    missing = [role for role in ROLES if role not in value]
    if unknown or missing:
        raise ValueError(
            f"needs exactly the keys {', '.join(ROLES)}; "
            + (f"unknown: {', '.join(map(str, unknown))}" if unknown else f"missing: {', '.join(missing)}")
        )
    return tuple((role, check_url(value[role])) for role in ROLES)


class ExternalServer:
    """A running endpoint, with the parts of `ManagedServer` that measuring uses."""

    command: list[str] = []  # nothing was launched
    log_path = None
    startup_seconds = 0.0
    process = None

    def __init__(self, spec, role: str, url: str):
        self.spec, self.role, self.url = spec, role, url
        self.served_names: tuple[str, ...] = (spec.model,)  # every name /v1/models lists, once checked

    @property
    def model(self) -> str:
        return self.spec.model

    @property
    def alive(self) -> bool:
        return True  # not ours to watch; a dead endpoint fails the run's requests with its URL

    def check(self) -> "ExternalServer":
        """Fail fast, naming the URL, unless the endpoint answers and serves the test's model."""
        try:
            response = httpx.get(f"{self.url}/v1/models", timeout=httpx.Timeout(10.0, connect=CONNECT_TIMEOUT))
            response.raise_for_status()
            served = [m.get("id") for m in response.json().get("data", [])]
        except (httpx.HTTPError, ValueError, AttributeError) as exc:
            raise EndpointError(
                f"the {self.role} endpoint {self.url} does not answer /v1/models: {type(exc).__name__}: {exc}"
            ) from None
        if self.spec.model not in served:
            raise EndpointError(
                f"the {self.role} endpoint {self.url} serves {served}, not {self.spec.model!r} "
                "(start it with --served-model-name set to the test's model)"
            )
        self.served_names = tuple(name for name in served if isinstance(name, str))
        return self

    def metrics_text(self) -> str:
        response = httpx.get(f"{self.url}/metrics", timeout=METRICS_TIMEOUT_S)
        response.raise_for_status()
        return response.text

    def metrics(self) -> list[Sample]:
        return parse_prometheus(self.metrics_text())

    def spec_decode_counters(self) -> SpecDecodeCounters:
        """SD counters for any name the endpoint serves; unavailable (never zero) without them."""
        return scrape_counters(self, self.served_names)

    def stop(self) -> None:
        """Not ours to stop."""

    def __repr__(self) -> str:
        return f"<ExternalServer {self.role} {self.url} {self.spec.label()}>"
