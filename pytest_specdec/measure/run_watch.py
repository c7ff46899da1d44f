"""What is read around one measured run besides its requests: the hardware's energy and the server's series.

Both start just before a run's first request and stop after its last reply, whatever the run's outcome;
neither raises (a reading that failed is unavailable, with the reason).  A server the plugin did not start
(endpoint mode) runs on hardware whose energy counters are not this machine's: its energy is not read; its
metrics page is its own, so its series is.
"""

from __future__ import annotations

from typing import Any

from ..engines import engine_named
from ..serving.energy import EnergyMeter, EnergyReading
from ..serving.metrics_page import MetricsPage
from ..serving.server import METRICS_TIMEOUT_S
from ..serving.server_series import ServerSeries, SeriesSampler

ENDPOINT_ENERGY = "the server is an endpoint the plugin did not start: its hardware's counters are not read"


class RunWatch:
    """Started when made; `stop()` gives the run's (EnergyReading, ServerSeries)."""

    def __init__(
        self, energy: Any, server: Any, spec: Any, series_interval_s: float | None, *, unanswered: str | None = None
    ):
        """`unanswered`: why the server's metrics page is not read during this run (it did not answer just
        before it), if so."""
        endpoint = bool(getattr(spec, "endpoints", None))
        self._why_no_energy = ENDPOINT_ENERGY if endpoint else str(energy)
        self._read_energy = energy.start() if isinstance(energy, EnergyMeter) and not endpoint else None
        engine = engine_named(spec.engine)
        self._sampler: SeriesSampler | None = None
        self._page: MetricsPage | None = None
        if series_interval_s is None:
            self._no_series = "server series off (--specdec-series-interval 0)"
        elif unanswered:
            self._no_series = f"{unanswered} before the run: not read during it"
        elif not engine.series_metrics:
            self._no_series = engine.series_refusal or f"{engine.title} names no server series"
        else:
            self._no_series = ""
            # One kept client for the run's reads: a client made per read held the load client's requests back.
            self._page = MetricsPage(server.url, METRICS_TIMEOUT_S)
            self._sampler = SeriesSampler(self._page.text, engine.series_metrics, series_interval_s).start()

    def stop(self) -> tuple[EnergyReading, ServerSeries]:
        energy = self._read_energy() if self._read_energy else EnergyReading(None, "", self._why_no_energy)
        series = self._sampler.stop() if self._sampler else ServerSeries.unavailable(self._no_series)
        if self._page is not None:
            self._page.close()
        return energy, series
