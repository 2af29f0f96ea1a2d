"""The Helm chart's values, as a model: `values.schema.json` is generated from it (as the CRD is from the
LlamaService model), so `helm install` refuses a typo or a bad value at install time, naming the field,
and `config:` is checked against the operator's own Settings instead of failing when the pod starts."""

from __future__ import annotations

import json
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

from llama_operator.api.settings import Settings

VALUES_SCHEMA_FILE = "charts/llama-operator/values.schema.json"

# Kubernetes objects the chart passes through as they are (resources, affinity, security contexts...):
# their own schemas live in the API server, which checks them when the Deployment is applied.
KubeObject = dict[str, Any]


class ValuesModel(BaseModel):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="forbid", frozen=True)


class CrdValues(ValuesModel):
    install: Annotated[
        bool,
        Field(description="Install and upgrade the LlamaService CRD with the chart (kept on uninstall)."),
    ] = True


class ImageValues(ValuesModel):
    repository: Annotated[str, Field(min_length=1)] = "ghcr.io/llama-operator/llama-operator"
    tag: Annotated[str, Field(description="Default: the chart's appVersion.")] = ""
    digest: Annotated[
        str,
        Field(
            description="sha256:... to pin the image by digest (wins over tag).",
            pattern=r"^(sha256:[0-9a-f]{64})?$",
        ),
    ] = ""
    pull_policy: Literal["Always", "IfNotPresent", "Never"] = "IfNotPresent"


class LocalObjectReference(ValuesModel):
    name: Annotated[str, Field(min_length=1, max_length=253)]


class ServiceAccountValues(ValuesModel):
    create: bool = True
    name: Annotated[str, Field(description="Default: the release's full name.")] = ""
    annotations: dict[str, str] = Field(default_factory=dict)


class ServiceMonitorValues(ValuesModel):
    enabled: Annotated[
        bool, Field(description="Create a ServiceMonitor (Prometheus Operator) for the operator's /metrics.")
    ] = False
    additional_labels: Annotated[
        dict[str, str],
        Field(
            description="Labels your Prometheus selects ServiceMonitors by (kube-prometheus-stack: release=<its release>)."
        ),
    ] = Field(default_factory=dict)
    interval: Annotated[str, Field(pattern=r"^([0-9]+(ms|s|m|h))+$")] = "30s"


class MetricsValues(ValuesModel):
    service_monitor: ServiceMonitorValues = Field(default_factory=ServiceMonitorValues)


class ChartValues(ValuesModel):
    """Everything `values.yaml` may hold."""

    crds: CrdValues = Field(default_factory=CrdValues)
    replica_count: Annotated[
        int, Field(description="Operator replicas: one leader acts, the others stand by.", ge=1, le=10)
    ] = 1
    image: ImageValues = Field(default_factory=ImageValues)
    image_pull_secrets: Annotated[
        list[LocalObjectReference],
        Field(description="Secrets for pulling the operator's image: [{name: regcred}]."),
    ] = Field(default_factory=list)
    watch_namespaces: Annotated[
        list[Annotated[str, Field(pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")]]
        | Annotated[str, Field(pattern=r"^[a-z0-9, -]*$")],
        Field(
            description="Namespaces to watch: a list, or a comma-separated string (--set watchNamespaces=a,b). "
            "Empty watches every namespace."
        ),
    ] = Field(default_factory=list)
    config: Annotated[Settings, Field(description="The operator's configuration (its Settings).")] = Field(
        default_factory=Settings
    )
    resources: KubeObject = Field(default_factory=dict)
    node_selector: dict[str, str] = Field(default_factory=dict)
    tolerations: list[KubeObject] = Field(default_factory=list)
    affinity: KubeObject = Field(default_factory=dict)
    pod_annotations: dict[str, str] = Field(default_factory=dict)
    pod_labels: dict[str, str] = Field(default_factory=dict)
    priority_class_name: str = ""
    pod_security_context: Annotated[
        KubeObject, Field(description="The operator pod's securityContext (default: non-root, seccomp).")
    ] = Field(default_factory=dict)
    security_context: Annotated[
        KubeObject, Field(description="The operator container's securityContext.")
    ] = Field(default_factory=dict)
    service_account: ServiceAccountValues = Field(default_factory=ServiceAccountValues)
    metrics: MetricsValues = Field(default_factory=MetricsValues)


def values_schema() -> dict[str, Any]:
    schema = ChartValues.model_json_schema(by_alias=True, mode="validation")
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "title": "llama-operator chart values",
        **schema,
    }


def render_values_schema() -> str:
    return json.dumps(values_schema(), indent=2, sort_keys=True) + "\n"
