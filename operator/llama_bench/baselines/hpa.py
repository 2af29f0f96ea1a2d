"""The Kubernetes HorizontalPodAutoscaler (autoscaling/v2) replica calculation and default behavior.

Per sync (15 s): desired = ceil(ratio * pods) with ratio = metric / target, skipped when the ratio is
within 10 % of 1. A Pods metric averages over the pods that report it; pods still starting report
nothing and count as 0 when scaling up (replica_calculator.go, "missing pods"). Defaults
(`behavior` unset): scale-down takes the highest recommendation of the last 300 s; scale-up adds at
most max(100 %, 4 pods) per 15 s; scale-down removes up to 100 % per 15 s. Time is an argument."""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class HpaSettings:
    target: float  # target average value per pod
    min_replicas: int = 1
    max_replicas: int = 10
    tolerance: float = 0.1
    sync_period: int = 15
    downscale_stabilization: float = 300.0
    upscale_stabilization: float = 0.0
    scale_up_percent: float = 100.0
    scale_up_pods: int = 4
    scale_up_period: float = 15.0


class HorizontalPodAutoscaler:
    """One HPA object; keeps the recommendation history and scale events the controller keeps."""

    def __init__(self, settings: HpaSettings) -> None:
        self.settings = settings
        self._recommendations: deque[tuple[float, int]] = deque()
        self._scale_ups: deque[tuple[float, int]] = deque()  # (time, replicas added)

    def pods_metric_replicas(self, current: int, reporting_pods: int, missing_pods: int, total: float) -> int:
        """calcPlainMetricReplicas for a Pods metric whose values sum to `total` over the reporting pods."""
        s = self.settings
        if reporting_pods <= 0:
            return current  # no metrics: the HPA reports an error and leaves the scale alone
        ratio = (total / reporting_pods) / s.target
        if missing_pods == 0:
            if abs(ratio - 1.0) <= s.tolerance:
                return current
            return math.ceil(ratio * reporting_pods)
        # Missing pods count as 0 on scale-up and as the target on scale-down.
        filled = total if ratio > 1.0 else total + missing_pods * s.target
        pods = reporting_pods + missing_pods
        new_ratio = (filled / pods) / s.target
        if abs(new_ratio - 1.0) <= s.tolerance or (ratio > 1.0 > new_ratio) or (ratio < 1.0 < new_ratio):
            return current
        replicas = math.ceil(new_ratio * pods)
        if (new_ratio < 1.0 and replicas > current) or (new_ratio > 1.0 and replicas < current):
            return current
        return replicas

    def external_average_replicas(self, current: int, total: float) -> int:
        """GetExternalPerPodMetricReplicas: an External metric with an AverageValue target."""
        s = self.settings
        ratio = total / (s.target * max(current, 1))
        if abs(ratio - 1.0) <= s.tolerance:
            return current
        return math.ceil(total / s.target)

    def normalize(self, now: float, current: int, recommended: int) -> int:
        """Stabilization windows, rate limits and min/max, as normalizeDesiredReplicasWithBehaviors."""
        s = self.settings
        up, down = recommended, recommended
        while self._recommendations and now - self._recommendations[0][0] > s.downscale_stabilization:
            self._recommendations.popleft()
        for time, replicas in self._recommendations:
            if now - time < s.upscale_stabilization:
                up = min(up, replicas)
            if now - time < s.downscale_stabilization:
                down = max(down, replicas)
        self._recommendations.append((now, recommended))
        desired = min(max(current, up), down)
        if desired > current:
            while self._scale_ups and now - self._scale_ups[0][0] >= s.scale_up_period:
                self._scale_ups.popleft()
            base = current - sum(added for _, added in self._scale_ups)
            limit = max(math.ceil(base * (1 + s.scale_up_percent / 100.0)), base + s.scale_up_pods)
            desired = min(desired, max(limit, current))
        desired = min(max(desired, s.min_replicas), s.max_replicas)
        if desired > current:
            self._scale_ups.append((now, desired - current))
        return desired
