"""Static provisioning: a fixed replica count, e.g. sized for the peak."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class StaticReplicas:
    replicas: int

    def desired(self) -> int:
        return self.replicas
