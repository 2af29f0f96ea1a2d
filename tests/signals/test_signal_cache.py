"""SignalCache: one set of queries per cycle, shared by every LlamaService's timer."""

from __future__ import annotations

from collections.abc import Mapping

from llama_operator.autoscale.promql import ServiceKey, ServiceView, SignalLabels
from llama_operator.autoscale.signals import Signals
from llama_operator.infra.prometheus import PrometheusSignals, SignalCache

VIEW = ServiceView(percentile=95, ready_replicas=1, starting_replicas=0, current_replicas=1)
KEYS = [("default", f"svc-{i}") for i in range(50)]


class CountingSource(PrometheusSignals):
    """The real class, with its network fetch replaced by a counter (no Prometheus needed here)."""

    def __init__(self) -> None:
        super().__init__("http://127.0.0.1:1", SignalLabels())
        self.fetches = 0

    def fetch(
        self, services: Mapping[ServiceKey, ServiceView], *, window_seconds: float
    ) -> dict[ServiceKey, Signals]:
        self.fetches += 1
        return {}


def test_the_services_are_listed_only_when_the_queries_are_due() -> None:
    source = CountingSource()
    cache = SignalCache(source=source, max_age_seconds=60.0, window_seconds=20.0)
    listings = 0

    def services() -> dict[ServiceKey, ServiceView]:
        nonlocal listings
        listings += 1
        return dict.fromkeys(KEYS, VIEW)

    for key in KEYS:  # every service's timer in one cycle
        assert cache.get(key, services) == (None, None)
    assert (source.fetches, listings) == (1, 1)
