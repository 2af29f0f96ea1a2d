"""Read the autoscaler's signals from Prometheus: one query per signal per cycle, for all services."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from prometheus_api_client import PrometheusConnect

from llama_operator.autoscale.promql import (
    Sample,
    ServiceKey,
    ServiceView,
    SignalLabels,
    assemble_signals,
    probe_query,
    resolve_kv_metric,
    signal_queries,
)
from llama_operator.autoscale.signals import Signals

log = logging.getLogger(__name__)


class PrometheusUnavailableError(RuntimeError):
    pass


def _samples(raw: list[dict[str, Any]]) -> list[Sample]:
    # prometheus-api-client returns values as strings: ("1700000000.1", "0.25").
    return [(item.get("metric", {}), float(item["value"][1])) for item in raw]


class PrometheusSignals:
    """Queries Prometheus; every method may raise PrometheusUnavailableError."""

    def __init__(self, url: str, labels: SignalLabels, *, timeout_seconds: float = 5.0) -> None:
        self.labels = labels
        self._client = PrometheusConnect(url=url, disable_ssl=True)
        self._timeout = timeout_seconds

    def query(self, promql: str) -> list[Sample]:
        try:
            raw = self._client.custom_query(promql, params={"timeout": f"{self._timeout:g}s"})
        except Exception as err:  # the client raises requests' and its own errors alike
            raise PrometheusUnavailableError(f"{type(err).__name__}: {err}") from err
        return _samples(raw)

    def fetch(
        self, services: Mapping[ServiceKey, ServiceView], *, window_seconds: float
    ) -> dict[ServiceKey, Signals]:
        """All services' signals; a query that fails leaves its signal out, which reads as no data."""
        kv_metric = resolve_kv_metric(self.query(probe_query()))
        results: dict[str, list[Sample]] = {}
        for name, promql in signal_queries(
            self.labels, kv_metric=kv_metric, window_seconds=window_seconds
        ).items():
            try:
                results[name] = self.query(promql)
            except PrometheusUnavailableError as err:
                log.warning("signal %s unavailable: %s", name, err)
        return assemble_signals(results, services, self.labels, window_seconds=window_seconds)


@dataclass
class SignalCache:
    """Shares one cycle's queries among the per-LlamaService timers: the first timer of a cycle queries
    for all services, the others reuse its result."""

    source: PrometheusSignals
    max_age_seconds: float
    window_seconds: float
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _fetched_at: float = -1.0
    _signals: dict[ServiceKey, Signals] = field(default_factory=dict)
    _error: str | None = None
    _asked_for: frozenset[ServiceKey] = frozenset()

    def get(
        self, key: ServiceKey, services: Callable[[], Mapping[ServiceKey, ServiceView]]
    ) -> tuple[Signals | None, str | None]:
        """(signals, None), or (None, why) when Prometheus could not be asked. `services` lists every
        autoscaled service; it is called only when the cycle's queries are due, so a timer that reuses
        them does no work per other service."""
        with self._lock:
            now = time.monotonic()
            if now - self._fetched_at > self.max_age_seconds or key not in self._asked_for:
                views = services()
                self._asked_for = frozenset(views)
                try:
                    self._signals = self.source.fetch(views, window_seconds=self.window_seconds)
                    self._error = None
                except PrometheusUnavailableError as err:
                    self._signals, self._error = {}, str(err)
                self._fetched_at = now
            return self._signals.get(key), self._error
