"""Read the autoscaler's signals from Prometheus: one query per signal per cycle, for all services."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

import requests
from prometheus_api_client import PrometheusConnect
from urllib3.util.retry import Retry

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


class PrometheusUnreachableError(PrometheusUnavailableError):
    """No connection at all (refused, reset, timed out), as against one query the server refused."""


def _samples(raw: list[dict[str, Any]]) -> list[Sample]:
    # prometheus-api-client returns values as strings: ("1700000000.1", "0.25").
    return [(item.get("metric", {}), float(item["value"][1])) for item in raw]


class PrometheusSignals:
    """Queries Prometheus; every method may raise PrometheusUnavailableError."""

    def __init__(self, url: str, labels: SignalLabels, *, timeout_seconds: float = 5.0) -> None:
        self.labels = labels
        # One quick retry at most: the autoscaler's cycle is seconds long, and an unreachable Prometheus
        # must read as "no data" within one cycle, not after urllib3's backoff on every query.
        self._client = PrometheusConnect(
            url=url,
            disable_ssl=True,
            retry=Retry(total=1, backoff_factor=0.1),
            timeout=int(timeout_seconds) + 1,
        )
        self._timeout = timeout_seconds
        self.queries = 0  # queries sent so far (the autoscaler reports them per cycle)

    def query(self, promql: str) -> list[Sample]:
        self.queries += 1
        try:
            raw = self._client.custom_query(promql, params={"timeout": f"{self._timeout:g}s"})
        except (requests.exceptions.ConnectionError, requests.exceptions.Timeout) as err:
            raise PrometheusUnreachableError(f"{type(err).__name__}: {err}") from err
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
            except PrometheusUnreachableError:
                raise  # no point asking the other queries of this cycle
            except PrometheusUnavailableError as err:
                log.warning("signal %s unavailable: %s", name, err)
        return assemble_signals(results, services, self.labels, window_seconds=window_seconds)
