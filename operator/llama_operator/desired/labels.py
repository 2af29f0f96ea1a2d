"""Labels that identify a LlamaService's objects; the selector never changes after creation."""

from __future__ import annotations

SERVICE_LABEL = "llama-operator.dev/llamaservice"
MANAGED_BY = "llama-operator"

# Scale to zero. The activator writes these annotations on a LlamaService (the operator only reads them):
# when it last held a request for it (RFC 3339; repeated while it holds one), and the last wake it measured
# ({"seconds": first held request to its first token, "time": RFC 3339}).
ACTIVATION_REQUESTED_ANNOTATION = "llama-operator.dev/activation-requested-at"
LAST_ACTIVATION_ANNOTATION = "llama-operator.dev/last-activation"
ACTIVATION_ANNOTATIONS = (ACTIVATION_REQUESTED_ANNOTATION, LAST_ACTIVATION_ANNOTATION)
# The router writes nothing in a tenant's namespace: it reports those two annotations on a Lease per service in
# its own namespace (labelled DEMAND_LABEL, naming the service and its uid), and the operator copies them.
DEMAND_LABEL = "llama-operator.dev/demand"
DEMAND_NAMESPACE_ANNOTATION = "llama-operator.dev/demand-namespace"
DEMAND_NAME_ANNOTATION = "llama-operator.dev/demand-name"
DEMAND_UID_ANNOTATION = "llama-operator.dev/demand-uid"
# The EndpointSlice that sends a scaled-to-zero LlamaService's traffic to the activator.
ENDPOINT_SLICE_MANAGER = "llama-operator.dev"
SERVICE_NAME_LABEL = "kubernetes.io/service-name"
SLICE_MANAGED_BY_LABEL = "endpointslice.kubernetes.io/managed-by"


def selector_labels(name: str) -> dict[str, str]:
    return {SERVICE_LABEL: name}


def object_labels(name: str) -> dict[str, str]:
    return {
        "app.kubernetes.io/name": "vllm",
        "app.kubernetes.io/instance": name,
        "app.kubernetes.io/component": "inference-server",
        "app.kubernetes.io/managed-by": MANAGED_BY,
        **selector_labels(name),
    }


def selector_string(name: str) -> str:
    return ",".join(f"{k}={v}" for k, v in selector_labels(name).items())


def activator_slice_name(name: str) -> str:
    return f"{name}-activator"


# A pod of a LlamaService with LoRA adapters is Ready only once the operator has loaded spec.adapters into it
# (handlers/adapters.py sets this condition): a new replica never serves before it has them.
ADAPTERS_READINESS_GATE = "llama-operator.dev/adapters-loaded"
