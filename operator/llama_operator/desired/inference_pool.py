"""The InferencePool of a LlamaService (Gateway API Inference Extension, inference.networking.k8s.io/v1):
what an inference gateway (Envoy AI Gateway, kgateway, Istio, GKE) routes an HTTPRoute to. Its selector
and target port are those of the service's vLLM pods; the endpoint picker is the platform's, when the
operator's configuration names one. Pure.

The extension's releases serve the same v1 kind with different schemas, and gateways ship the CRD of
their own release: v1.0-v1.5 require spec.endpointPickerRef, v1.0-v1.3 know no spec.appProtocol (the API
server drops it, so a pool sent with it never matches what is stored). The pool is built for the schema
the cluster serves, read from its CRD (InferencePoolSchema), or not at all where it cannot be valid."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from llama_operator.api.resource import LlamaService
from llama_operator.api.settings import Settings
from llama_operator.desired.labels import object_labels, selector_labels
from llama_operator.desired.pod import HTTP_PORT, owner_reference

INFERENCE_POOL_API = "inference.networking.k8s.io/v1"
INFERENCE_POOL_KIND = "InferencePool"
# The annotation the extension's CRDs carry with their release (e.g. v1.3.0).
BUNDLE_VERSION_ANNOTATION = "inference.networking.k8s.io/bundle-version"


@dataclass(frozen=True)
class InferencePoolSchema:
    """What the served InferencePool v1 CRD accepts. The defaults are the newest release's (v1.6)."""

    picker_required: bool = False  # spec.endpointPickerRef is required
    app_protocol: bool = True  # spec.appProtocol is a field
    version: str = ""  # the extension's release, for messages ("" where the CRD does not say)

    @classmethod
    def from_crd(cls, crd: Mapping[str, Any]) -> InferencePoolSchema:
        """Read from the CRD object (as the API server returns it) its v1 version's spec schema."""
        versions = (crd.get("spec") or {}).get("versions") or []
        v1: Mapping[str, Any] = next((v for v in versions if v.get("name") == "v1"), {})
        root = ((v1.get("schema") or {}).get("openAPIV3Schema") or {}).get("properties") or {}
        spec = root.get("spec") or {}
        annotations = (crd.get("metadata") or {}).get("annotations") or {}
        return cls(
            picker_required="endpointPickerRef" in (spec.get("required") or []),
            app_protocol="appProtocol" in (spec.get("properties") or {}),
            version=str(annotations.get(BUNDLE_VERSION_ANNOTATION) or ""),
        )

    def described(self) -> str:
        return f"the served InferencePool CRD ({self.version or 'version not stated'})"


LATEST_SCHEMA = InferencePoolSchema()


def inference_pool_unavailable(settings: Settings, schema: InferencePoolSchema) -> str | None:
    """Why no pool can be valid against `schema` with these settings (None: one can)."""
    if schema.picker_required and not settings.inference_pool_endpoint_picker:
        return (
            f"{schema.described()} requires spec.endpointPickerRef and the operator's config names no "
            "endpoint picker: set config.inferencePoolEndpointPicker to the picker's Service (in each "
            "LlamaService's namespace), or upgrade the gateway's inference extension to v1.6 or later; "
            "no InferencePool is made until then"
        )
    return None


def build_inference_pool(
    svc: LlamaService, settings: Settings, schema: InferencePoolSchema = LATEST_SCHEMA
) -> dict[str, Any] | None:
    """The pool for the served schema, or None where none can be valid (inference_pool_unavailable)."""
    if inference_pool_unavailable(settings, schema) is not None:
        return None
    name = svc.metadata.name
    spec: dict[str, Any] = {
        "selector": {"matchLabels": selector_labels(name)},
        "targetPorts": [{"number": HTTP_PORT}],
    }
    if schema.app_protocol:
        spec["appProtocol"] = "http"
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
