"""Knative's KPA (autoscaler.go), on concurrency per pod.

Every 2 s: desired = ceil(average concurrency / (target * utilization)) over the 60 s stable window
and the 6 s panic window. Panic starts when panic-desired / ready >= 2 and lasts until the stable
window has passed without that; in panic the count never goes down. Scale-up is bounded by
max-scale-up-rate (1000x), scale-down by max-scale-down-rate (to half per tick).
Knative's defaults: container-concurrency-target-percentage 70 %, target 100 (we pass the
LlamaService's stated per-replica target instead: 100 would never scale an LLM server)."""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class KpaSettings:
    target_concurrency: float
    target_utilization: float = 0.7
    tick: int = 2
    stable_window: float = 60.0
    panic_window: float = 6.0
    panic_threshold: float = 2.0
    max_scale_up_rate: float = 1000.0
    max_scale_down_rate: float = 2.0
    min_replicas: int = 1
    max_replicas: int = 10


class KnativePodAutoscaler:
    """The KPA's decider for one revision."""

    def __init__(self, settings: KpaSettings) -> None:
        self.settings = settings
        self.panic_since: float | None = None
        self._max_panic_pods = 0

    def desired(self, now: float, ready: int, stable_concurrency: float, panic_concurrency: float) -> int:
        """Replicas from the window averages of total concurrency (all pods) at `now`."""
        s = self.settings
        ready = max(ready, 1)
        per_pod = s.target_concurrency * s.target_utilization
        max_up = math.ceil(s.max_scale_up_rate * ready)
        max_down = math.floor(ready / s.max_scale_down_rate)
        stable = min(max(math.ceil(stable_concurrency / per_pod), max_down), max_up)
        panic = min(max(math.ceil(panic_concurrency / per_pod), max_down), max_up)
        over_threshold = panic / ready >= s.panic_threshold
        if over_threshold:
            if self.panic_since is None:
                self._max_panic_pods = ready
            self.panic_since = now
        elif self.panic_since is not None and now - self.panic_since >= s.stable_window:
            self.panic_since = None
            self._max_panic_pods = 0
        desired = stable
        if self.panic_since is not None:
            self._max_panic_pods = max(self._max_panic_pods, panic)
            desired = self._max_panic_pods
        return min(max(desired, s.min_replicas), s.max_replicas)
