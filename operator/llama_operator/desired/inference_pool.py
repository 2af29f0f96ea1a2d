"""The InferencePool of a LlamaService (Gateway API Inference Extension, inference.networking.k8s.io/v1):
what an inference gateway (Envoy AI Gateway, kgateway, Istio, GKE) routes an HTTPRoute to. Its selector
and target port are those of the service's vLLM pods; the endpoint picker is the platform's, when the
operator's configuration names one. Pure."""

from __future__ import annotations

from typing import Any

from llama_operator.api.resource import LlamaService
from llama_operator.api.settings import Settings
from llama_operator.desired.labels import object_labels, selector_labels
from llama_operator.desired.pod import HTTP_PORT, owner_reference

INFERENCE_POOL_API = "inference.networking.k8s.io/v1"
INFERENCE_POOL_KIND = "InferencePool"


def build_inference_pool(svc: LlamaService, settings: Settings) -> dict[str, Any]:
    name = svc.metadata.name
    spec: dict[str, Any] = {
        "selector": {"matchLabels": selector_labels(name)},
        "targetPorts": [{"number": HTTP_PORT}],
        "appProtocol": "http",
    }
    if settings.inference_pool_endpoint_picker:
        spec["endpointPickerRef"] = {
            "group": "",
            "kind": "Service",
            "name": settings.inference_pool_endpoint_picker,
            "port": {"number": settings.inference_pool_endpoint_picker_port},
            "failureMode": settings.inference_pool_failure_mode,
        }
    return {
        "apiVersion": INFERENCE_POOL_API,
        "kind": INFERENCE_POOL_KIND,
        "metadata": {
            "name": name,
            "namespace": svc.metadata.namespace,
            "labels": object_labels(name),
            "ownerReferences": [owner_reference(svc)],
        },
        "spec": spec,
    }
