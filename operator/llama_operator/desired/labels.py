"""Labels that identify a LlamaService's objects; the selector never changes after creation."""

from __future__ import annotations

SERVICE_LABEL = "llama-operator.dev/llamaservice"
MANAGED_BY = "llama-operator"


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
