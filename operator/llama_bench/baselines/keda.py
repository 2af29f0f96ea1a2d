"""KEDA's Prometheus scaler as the vLLM production-stack configures it.

The production-stack's ScaledObject triggers on `vllm:num_requests_waiting` with threshold 5
(metricType defaults to AverageValue). KEDA polls every 30 s (pollingInterval) and feeds the HPA an
External metric: desired = ceil(value / threshold), then the HPA's tolerance, stabilization and
rate rules. The query returns the fleet's waiting requests (summed: the scaler accepts one series)."""

from __future__ import annotations

from dataclasses import dataclass

from llama_bench.baselines.hpa import HorizontalPodAutoscaler, HpaSettings

PRODUCTION_STACK_THRESHOLD = 5.0


@dataclass(frozen=True, slots=True)
class KedaSettings:
    threshold: float = PRODUCTION_STACK_THRESHOLD
    polling_interval: float = 30.0
    min_replicas: int = 1
    max_replicas: int = 10


class KedaPrometheusScaler:
    """A ScaledObject with one Prometheus trigger, and the HPA KEDA creates for it."""

    def __init__(self, settings: KedaSettings) -> None:
        self.settings = settings
        self.hpa = HorizontalPodAutoscaler(
            HpaSettings(
                target=settings.threshold,
                min_replicas=settings.min_replicas,
                max_replicas=settings.max_replicas,
            )
        )
        self._value: float | None = None
        self._polled_at: float | None = None

    def poll_due(self, now: float) -> bool:
        return self._polled_at is None or now - self._polled_at >= self.settings.polling_interval

    def observe(self, now: float, value: float | None) -> None:
        """A poll of the query; an empty result reads as 0, as KEDA does."""
        self._value = 0.0 if value is None else value
        self._polled_at = now

    def desired(self, now: float, current: int) -> int:
        """One HPA sync against the last polled value."""
        value = 0.0 if self._value is None else self._value
        return self.hpa.normalize(now, current, self.hpa.external_average_replicas(current, value))
