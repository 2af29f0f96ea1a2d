"""What the operator keeps in kopf's memo, typed: the start-up handler (handlers/startup.py) fills it once,
every handler and the controller read it. The controller itself is added last, once the indexes exist
(handlers/controller.py, ControllerMemo). kopf passes its own `kopf.Memo` (a dict with attribute access);
this protocol is how the code that reads it is checked (mypy strict), attribute by attribute."""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from llama_operator.api.settings import Settings
    from llama_operator.desired.inference_pool import InferencePoolSchema
    from llama_operator.infra.kube import Kube
    from llama_operator.infra.metrics import Health, OperatorMetrics
    from llama_operator.infra.prometheus import PrometheusSignals


class OperatorMemo(Protocol):
    settings: Settings
    kube: Kube
    metrics: OperatorMetrics
    health: Health
    prometheus: PrometheusSignals
    pod_monitor: bool  # the PodMonitor kind is served (or config.podMonitor says always)
    # What the served InferencePool CRD accepts (config.inferencePool auto and the v1 CRD served), else None.
    inference_pool: InferencePoolSchema | None
