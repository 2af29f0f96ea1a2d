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


# A Prometheus duration (rule `for:`): 90s, 15m, 1h30m.
PromDuration = Annotated[str, Field(pattern=r"^([0-9]+(ms|s|m|h|d|w|y))+$")]
LabelKey = Annotated[
    str, Field(pattern=r"^([a-z0-9.-]+/)?[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$", max_length=316)
]

RUNBOOK_URL = "https://github.com/llama-operator/llama-operator/blob/main/docs/runbook.md"


class GrafanaDashboardValues(ValuesModel):
    enabled: Annotated[
        bool, Field(description="Ship the dashboard as a ConfigMap that Grafana's dashboard sidecar loads.")
    ] = True
    label: Annotated[
        LabelKey, Field(description="The label Grafana's sidecar looks for (sidecar.dashboards.label).")
    ] = "grafana_dashboard"
    label_value: Annotated[str, Field(description="Its value (sidecar.dashboards.labelValue).")] = "1"
    namespace: Annotated[
        str,
        Field(
            description="Namespace of the ConfigMap (default: the release's); the sidecar watches its own "
            "namespace unless searchNamespace is ALL."
        ),
    ] = ""
    annotations: Annotated[
        dict[str, str],
        Field(description="e.g. {grafana_folder: LLM} where the sidecar's folderAnnotation is set."),
    ] = Field(default_factory=dict)


class GrafanaValues(ValuesModel):
    dashboard: GrafanaDashboardValues = Field(default_factory=GrafanaDashboardValues)


class PrometheusRuleValues(ValuesModel):
    """The SLO alerts (docs/runbook.md). The defaults are what the promtool tests run."""

    enabled: Annotated[
        bool,
        Field(
            description="Create a PrometheusRule (Prometheus Operator) with the SLO recording rules and alerts."
        ),
    ] = False
    additional_labels: Annotated[
        dict[str, str],
        Field(
            description="Labels your Prometheus selects rules by (kube-prometheus-stack: release=<its release>)."
        ),
    ] = Field(default_factory=dict)
    namespace: Annotated[
        str, Field(description="Namespace of the PrometheusRule (default: the release's).")
    ] = ""
    operator_job: Annotated[
        str,
        Field(
            description="The `job` label of the operator's scrape, for LlamaOperatorDown (default: "
            "<fullname>-metrics, the job of the chart's ServiceMonitor).",
            pattern=r"^[^\"'\\{}\n]*$",
        ),
    ] = ""
    runbook_url: Annotated[
        str, Field(description="Where docs/runbook.md is served; alerts link its sections.")
    ] = RUNBOOK_URL
    page_severity: Annotated[
        str, Field(description="`severity` of alerts that page (fast budget burn, operator down).")
    ] = "critical"
    ticket_severity: Annotated[str, Field(description="`severity` of alerts that open a ticket.")] = "warning"
    scaling_limited_for: Annotated[
        PromDuration,
        Field(description="LlamaServiceScalingLimited: at maxReplicas and missing the SLO for this long."),
    ] = "15m"
    no_metrics_for: Annotated[
        PromDuration, Field(description="LlamaServiceNoMetrics: ready replicas but no signals for this long.")
    ] = "10m"
    operator_down_for: Annotated[
        PromDuration,
        Field(description="LlamaOperatorDown: no operator scraped up, or none leading, for this long."),
    ] = "5m"
    reconcile_errors_for: Annotated[
        PromDuration, Field(description="LlamaOperatorReconcileErrors: reconciles failing for this long.")
    ] = "15m"


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
    grafana: GrafanaValues = Field(default_factory=GrafanaValues)
    prometheus_rule: PrometheusRuleValues = Field(default_factory=PrometheusRuleValues)


def values_schema() -> dict[str, Any]:
    schema = ChartValues.model_json_schema(by_alias=True, mode="validation")
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "title": "llama-operator chart values",
        **schema,
    }


def render_values_schema() -> str:
    return json.dumps(values_schema(), indent=2, sort_keys=True) + "\n"
