"""The Helm chart's values, as a model: `values.schema.json` is generated from it (as the CRD is from the
LlamaService model), so `helm install` refuses a typo or a bad value at install time, naming the field,
and `config:` is checked against the operator's own Settings instead of failing when the pod starts."""

from __future__ import annotations

import json
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

from llama_operator.api.settings import HTTP_URL_PATTERN, Settings

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
    repository: Annotated[str, Field(description="The operator's image.", min_length=1)] = (
        "ghcr.io/llama-operator/llama-operator"
    )
    tag: Annotated[str, Field(description="Default: the chart's appVersion.")] = ""
    digest: Annotated[
        str,
        Field(
            description="sha256:... to pin the image by digest (wins over tag).",
            pattern=r"^(sha256:[0-9a-f]{64})?$",
        ),
    ] = ""
    pull_policy: Annotated[
        Literal["Always", "IfNotPresent", "Never"], Field(description="imagePullPolicy.")
    ] = "IfNotPresent"


class ActivatorImageValues(ValuesModel):
    """The activator's image: by default the operator's (the same program, `llama-operator activator`)."""

    repository: Annotated[str, Field(description="Default: image.repository (the operator's).")] = ""
    tag: Annotated[
        str, Field(description="Default: image.tag, then the chart's appVersion (or image.digest).")
    ] = ""
    digest: Annotated[
        str,
        Field(
            description="sha256:... to pin the activator's image by digest (wins over tag).",
            pattern=r"^(sha256:[0-9a-f]{64})?$",
        ),
    ] = ""
    pull_policy: Annotated[
        Literal["", "Always", "IfNotPresent", "Never"], Field(description="Default: image.pullPolicy.")
    ] = ""


class LocalObjectReference(ValuesModel):
    name: Annotated[
        str, Field(description="A Secret in the release namespace.", min_length=1, max_length=253)
    ]


class ServiceAccountValues(ValuesModel):
    create: Annotated[bool, Field(description="Create the operator's ServiceAccount (else use `name`).")] = (
        True
    )
    name: Annotated[str, Field(description="Default: the release's full name.")] = ""
    annotations: Annotated[
        dict[str, str], Field(description="e.g. a cloud IAM role binding (workload identity).")
    ] = Field(default_factory=dict)


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
    interval: Annotated[str, Field(description="Scrape interval.", pattern=r"^([0-9]+(ms|s|m|h))+$")] = "30s"
    namespace: Annotated[
        str,
        Field(
            description="Namespace of the ServiceMonitor (default: the release's), e.g. the one your Prometheus "
            "looks in (its serviceMonitorNamespaceSelector); it selects the Service in the release namespace."
        ),
    ] = ""


class MetricsValues(ValuesModel):
    service_monitor: ServiceMonitorValues = Field(default_factory=ServiceMonitorValues)


class MonitoringValues(ValuesModel):
    """What every monitoring object of the release shares."""

    labels: Annotated[
        dict[str, str],
        Field(
            description="Labels on every ServiceMonitor, PodMonitor and PrometheusRule of the release, and on the "
            "PodMonitors the operator creates per LlamaService: the one place to say what your Prometheus "
            "selects them by (kube-prometheus-stack: {release: <its release name>})."
        ),
    ] = Field(default_factory=dict)


class PodDisruptionBudgetValues(ValuesModel):
    enabled: Annotated[
        bool,
        Field(
            description="A PodDisruptionBudget for the operator while replicaCount > 1: a drain keeps a "
            "leader or a warm standby."
        ),
    ] = True
    min_available: Annotated[
        int, Field(description="Operator pods a voluntary disruption must leave running.", ge=1)
    ] = 1


# A Prometheus duration (rule `for:`): 90s, 15m, 1h30m.
PromDuration = Annotated[str, Field(pattern=r"^([0-9]+(ms|s|m|h|d|w|y))+$")]
LabelKey = Annotated[
    str, Field(pattern=r"^([a-z0-9.-]+/)?[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$", max_length=316)
]

ValidationAction = Literal["Deny", "Warn", "Audit"]
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
            "<fullname>-metrics, the job of the chart's ServiceMonitor). Without metrics.serviceMonitor or this "
            "value, LlamaOperatorDown is not rendered: absent(up) would page with nothing scraping.",
            pattern=r"^[^\"'\\{}\n]*$",
        ),
    ] = ""
    runbook_url: Annotated[
        str,
        Field(
            description="Where docs/runbook.md is served (an http(s) URL); alerts link its sections.",
            pattern=HTTP_URL_PATTERN,
            json_schema_extra={"format": "uri"},
        ),
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
    not_ready_for: Annotated[
        PromDuration,
        Field(description="LlamaServiceNotReady: no ready replica (and not at zero) for this long."),
    ] = "15m"
    degraded_for: Annotated[
        PromDuration, Field(description="LlamaServiceDegraded: the Degraded condition True for this long.")
    ] = "15m"
    activator_job: Annotated[
        str,
        Field(
            description="The `job` label of the activator's scrape, for LlamaActivatorDown (default: "
            "<fullname>-activator, the job of the chart's activator ServiceMonitor). Without a ServiceMonitor "
            "or this value, the rules that need that scrape are not rendered.",
            pattern=r"^[^\"'\\{}\n]*$",
        ),
    ] = ""


class PrometheusCaValues(ValuesModel):
    config_map: Annotated[str, Field(description="ConfigMap holding the CA bundle (or give secret).")] = ""
    secret: Annotated[str, Field(description="Secret holding the CA bundle (or give configMap).")] = ""
    key: Annotated[str, Field(min_length=1, description="Key of the CA bundle in it.")] = "ca.crt"


class PrometheusBasicAuthValues(ValuesModel):
    secret_name: Annotated[
        str, Field(description="Secret (release namespace) with the basic-auth username and password.")
    ] = ""
    username_key: Annotated[str, Field(min_length=1, description="Key of the username in the Secret.")] = (
        "username"
    )
    password_key: Annotated[str, Field(min_length=1, description="Key of the password in the Secret.")] = (
        "password"
    )


class PrometheusBearerTokenValues(ValuesModel):
    secret_name: Annotated[str, Field(description="Secret (release namespace) with a bearer token.")] = ""
    key: Annotated[str, Field(min_length=1, description="Key of the token in the Secret.")] = "token"


class PrometheusValues(ValuesModel):
    """What the chart mounts for the Prometheus connection; config gets the files' paths."""

    ca: PrometheusCaValues = Field(default_factory=PrometheusCaValues)
    basic_auth: PrometheusBasicAuthValues = Field(default_factory=PrometheusBasicAuthValues)
    bearer_token: PrometheusBearerTokenValues = Field(default_factory=PrometheusBearerTokenValues)


class RouterLimitValues(ValuesModel):
    """The router's limits, per replica."""

    max_body_mib: Annotated[float, Field(description="A request body's size cap (413 beyond).", gt=0)] = 8
    max_buffered_mib: Annotated[float, Field(description="Request bodies in memory at once.", gt=0)] = 64
    max_held_requests: Annotated[int, Field(description="Requests held at once, all services.", ge=1)] = 1000
    max_held_requests_per_service: Annotated[
        int, Field(description="Requests held at once for one LlamaService.", ge=1)
    ] = 100
    max_held_mib_per_service: Annotated[
        float, Field(description="Bodies of one LlamaService's held requests.", gt=0)
    ] = 16
    max_hold_seconds: Annotated[
        int, Field(description="Cap on every LlamaService's activationTimeoutSeconds.", ge=1)
    ] = 300
    header_timeout_seconds: Annotated[
        float, Field(description="A connection completes a request's headers within this.", gt=0)
    ] = 15
    body_timeout_seconds: Annotated[float, Field(description="A request body arrives within this.", gt=0)] = (
        30
    )
    upstream_idle_seconds: Annotated[
        float, Field(description="A vLLM pod that sends nothing for this long is given up (504).", gt=0)
    ] = 300
    max_streams: Annotated[int, Field(description="Requests forwarded at once, all namespaces.", ge=1)] = 2048
    namespace_share: Annotated[
        float,
        Field(
            description="The share of held requests, held bytes and streams one namespace may take (429 beyond).",
            gt=0,
            le=1,
        ),
    ] = 0.5
    namespace_shares: Annotated[
        dict[str, Annotated[float, Field(gt=0, le=1)]],
        Field(description="A namespace's own share, instead of namespaceShare."),
    ] = Field(default_factory=dict)


class NetworkPolicyValues(ValuesModel):
    """A NetworkPolicy in each watched namespace: only the router, the operator's probes and the listed
    peers reach the vLLM pods (needs watchNamespaces, and a network plugin that enforces policies)."""

    enabled: Annotated[bool, Field(description="Create the NetworkPolicies.")] = False
    extra_from: Annotated[
        list[KubeObject],
        Field(description="More NetworkPolicy peers allowed in (e.g. Prometheus, a gateway's namespace)."),
    ] = Field(default_factory=list)


class ActivatorValues(ValuesModel):
    """The activator (scale to zero): its Deployment, Service and RBAC."""

    enabled: Annotated[
        bool,
        Field(
            description="Deploy the activator: LlamaServices with autoscaling.minReplicas 0 then scale to zero "
            "when idle, and their first request after that is held while a replica starts."
        ),
    ] = False
    replica_count: Annotated[
        int, Field(description="Activator replicas (stateless: any replica holds any request).", ge=1, le=20)
    ] = 2
    image: ActivatorImageValues = Field(default_factory=ActivatorImageValues)
    port: Annotated[int, Field(description="The proxy's port.", ge=1, le=65535)] = 8000
    admin_port: Annotated[int, Field(description="Port of /metrics, /healthz, /readyz.", ge=1, le=65535)] = (
        9090
    )
    resources: Annotated[KubeObject, Field(description="The activator container's requests and limits.")] = (
        Field(default_factory=dict)
    )
    pod_annotations: Annotated[dict[str, str], Field(description="Annotations on the activator pods.")] = (
        Field(default_factory=dict)
    )
    pod_labels: Annotated[dict[str, str], Field(description="Extra labels on the activator pods.")] = Field(
        default_factory=dict
    )
    node_selector: Annotated[dict[str, str], Field(description="The activator pods' nodeSelector.")] = Field(
        default_factory=dict
    )
    tolerations: Annotated[list[KubeObject], Field(description="The activator pods' tolerations.")] = Field(
        default_factory=list
    )
    affinity: Annotated[KubeObject, Field(description="The activator pods' affinity.")] = Field(
        default_factory=dict
    )
    trusted_namespaces: Annotated[
        list[str],
        Field(
            description="Namespaces whose pods (a gateway that authenticates its clients) may address any "
            "namespace's LlamaServices through the router; every other caller reaches only its own namespace's."
        ),
    ] = Field(default_factory=list)
    trusted_sources: Annotated[
        list[str],
        Field(
            description="Source addresses trusted like a trusted namespace's pods (a host-network gateway)."
        ),
    ] = Field(default_factory=list)
    endpoint_picker_port: Annotated[
        int,
        Field(
            description="Serve the router as the endpoint picker of InferencePools (Envoy ext_proc, gRPC) to "
            "the trusted gateways on this port; with watchNamespaces, each of them gets a Service "
            "<release>-llama-operator-epp that leads there and every InferencePool names it "
            "(config.inferencePoolEndpointPicker, unless set). 0: not served.",
            ge=0,
            le=65535,
        ),
    ] = 0
    endpoint_picker_tls: Annotated[
        bool,
        Field(
            description="The endpoint picker serves TLS with a self-signed certificate the chart makes (gateways "
            "dial their picker with TLS, mostly unverified, as the inference extension's own picker serves "
            "it); false: plaintext gRPC."
        ),
    ] = True
    drain_seconds: Annotated[
        int, Field(description="After SIGTERM, how long held and streaming requests may still finish.", ge=0)
    ] = 45
    limits: Annotated[
        RouterLimitValues,
        Field(description="What one router replica holds at most (503 + Retry-After beyond)."),
    ] = Field(default_factory=RouterLimitValues)
    network_policy: Annotated[
        NetworkPolicyValues, Field(description="A NetworkPolicy per namespace for the vLLM pods.")
    ] = Field(default_factory=NetworkPolicyValues)


class AdmissionPolicyValues(ValuesModel):
    """A ValidatingAdmissionPolicy that refuses changes to the objects the operator controls (the Deployment,
    stage DaemonSet, Service, PodDisruptionBudget, PodMonitor and EndpointSlices of each LlamaService) by
    anyone but the operator and Kubernetes' own controllers, so that a hand edit never reaches a pod."""

    enabled: Annotated[
        bool,
        Field(
            description="Install the policy and its binding (Kubernetes 1.30 or newer: admissionregistration/v1)."
        ),
    ] = False
    validation_actions: Annotated[
        list[ValidationAction],
        Field(
            description="What a refused change gets: Deny, or [Warn, Audit] to try the policy out first.",
            min_length=1,
        ),
    ] = Field(default_factory=lambda: list[ValidationAction](["Deny"]))
    exempt_usernames: Annotated[
        list[Annotated[str, Field(min_length=1)]],
        Field(description="Further users allowed to change owned objects (e.g. a GitOps controller)."),
    ] = Field(default_factory=list)
    exempt_groups: Annotated[
        list[Annotated[str, Field(min_length=1)]],
        Field(
            description="Groups allowed to change owned objects (a break-glass group; not system:masters by default)."
        ),
    ] = Field(default_factory=list)
    namespace_selector: Annotated[
        KubeObject,
        Field(
            description="The namespaces the policy applies in (a label selector). Empty: the watched namespaces "
            "when watchNamespaces lists them, else every namespace."
        ),
    ] = Field(default_factory=dict)


class GlobalValues(BaseModel):
    """A parent chart's values shared with every subchart. Helm passes all of them in, so keys this chart
    does not read are accepted; the two it reads are the common charts' convention (Bitnami's)."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="allow", frozen=True)

    image_registry: Annotated[
        str,
        Field(
            description="A registry (a mirror) in front of every image of the chart: it replaces the "
            "registry of image.repository and activator.image.repository (or goes before a repository "
            "that names none). The vLLM images are config.gpuImage and config.cpuImage.",
            pattern=r"^([A-Za-z0-9.-]+(:[0-9]+)?(/[a-z0-9._/-]*[a-z0-9])?)?$",
        ),
    ] = ""
    image_pull_secrets: Annotated[
        list[Annotated[str, Field(min_length=1, max_length=253)] | LocalObjectReference],
        Field(
            description="Secrets for pulling the chart's images, after imagePullSecrets: names or [{name: regcred}]."
        ),
    ] = Field(default_factory=list)


class ChartValues(ValuesModel):
    """Everything `values.yaml` may hold."""

    global_: Annotated[
        GlobalValues,
        Field(alias="global", description="Values a parent chart shares with its subcharts."),
    ] = Field(default_factory=GlobalValues)
    enabled: Annotated[
        bool,
        Field(
            description="Read by a parent chart's dependency condition (condition: llama-operator.enabled); "
            "the chart itself renders the same either way."
        ),
    ] = True
    name_override: Annotated[
        str,
        Field(
            description="Replaces the chart's name in object names and app.kubernetes.io/name.",
            pattern=r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?)?$",
            max_length=63,
        ),
    ] = ""
    fullname_override: Annotated[
        str,
        Field(
            description="The objects' full name (default: <release>-<chart name>, or the release name when "
            "it holds the chart name).",
            pattern=r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?)?$",
            max_length=63,
        ),
    ] = ""
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
            description="Namespaces to watch: a list (--set 'watchNamespaces={a,b}'), or a comma-separated string "
            "(--set-string 'watchNamespaces=a\\,b'). "
            "Empty watches every namespace."
        ),
    ] = Field(default_factory=list)
    log_format: Annotated[
        Literal["plain", "full", "json"],
        Field(
            description="The operator's log lines: json (one object a line), full or plain (kopf's --log-format)."
        ),
    ] = "full"
    config: Annotated[Settings, Field(description="The operator's configuration (its Settings).")] = Field(
        default_factory=Settings
    )
    resources: Annotated[KubeObject, Field(description="The operator container's requests and limits.")] = (
        Field(default_factory=dict)
    )
    node_selector: Annotated[dict[str, str], Field(description="The operator pod's nodeSelector.")] = Field(
        default_factory=dict
    )
    tolerations: Annotated[list[KubeObject], Field(description="The operator pod's tolerations.")] = Field(
        default_factory=list
    )
    affinity: Annotated[KubeObject, Field(description="The operator pod's affinity.")] = Field(
        default_factory=dict
    )
    pod_annotations: Annotated[dict[str, str], Field(description="Annotations on the operator pod.")] = Field(
        default_factory=dict
    )
    pod_labels: Annotated[dict[str, str], Field(description="Extra labels on the operator pod.")] = Field(
        default_factory=dict
    )
    priority_class_name: Annotated[str, Field(description="The operator pod's PriorityClass.")] = ""
    topology_spread_constraints: Annotated[
        list[KubeObject],
        Field(
            description="The operator pods' topologySpreadConstraints (a labelSelector defaults to the "
            "operator's pods), e.g. across zones with replicaCount > 1."
        ),
    ] = Field(default_factory=list)
    pod_disruption_budget: PodDisruptionBudgetValues = Field(default_factory=PodDisruptionBudgetValues)
    extra_env: Annotated[
        list[KubeObject],
        Field(description="More env entries for the operator container (e.g. HTTPS_PROXY, NO_PROXY)."),
    ] = Field(default_factory=list)
    extra_volumes: Annotated[
        list[KubeObject], Field(description="More volumes of the operator pod (e.g. a corporate CA bundle).")
    ] = Field(default_factory=list)
    extra_volume_mounts: Annotated[
        list[KubeObject], Field(description="Mounts of extraVolumes into the operator container.")
    ] = Field(default_factory=list)
    extra_args: Annotated[
        list[str],
        Field(
            description="More arguments for `llama-operator run` (e.g. kopf's --liveness or --log-prefix)."
        ),
    ] = Field(default_factory=list)
    init_containers: Annotated[
        list[KubeObject], Field(description="Init containers of the operator pod (e.g. waiting for a proxy).")
    ] = Field(default_factory=list)
    extra_containers: Annotated[
        list[KubeObject],
        Field(description="Sidecars of the operator pod (e.g. a log shipper, an auth proxy)."),
    ] = Field(default_factory=list)
    common_labels: Annotated[
        dict[str, str],
        Field(
            description="Labels on every object of the release (cost center, team); not the chart's own "
            "selector labels.",
            json_schema_extra={
                "propertyNames": {"not": {"pattern": "^app\\.kubernetes\\.io/(name|instance)$"}}
            },
        ),
    ] = Field(default_factory=dict)
    pod_security_context: Annotated[
        KubeObject, Field(description="The operator pod's securityContext (default: non-root, seccomp).")
    ] = Field(default_factory=dict)
    security_context: Annotated[
        KubeObject, Field(description="The operator container's securityContext.")
    ] = Field(default_factory=dict)
    prometheus: Annotated[
        PrometheusValues,
        Field(
            description="The Prometheus connection's CA bundle and credentials, mounted from a ConfigMap/Secrets."
        ),
    ] = Field(default_factory=PrometheusValues)
    service_account: ServiceAccountValues = Field(default_factory=ServiceAccountValues)
    metrics: MetricsValues = Field(default_factory=MetricsValues)
    monitoring: MonitoringValues = Field(default_factory=MonitoringValues)
    grafana: GrafanaValues = Field(default_factory=GrafanaValues)
    prometheus_rule: PrometheusRuleValues = Field(default_factory=PrometheusRuleValues)
    activator: ActivatorValues = Field(default_factory=ActivatorValues)
    admission_policy: AdmissionPolicyValues = Field(default_factory=AdmissionPolicyValues)


def values_schema() -> dict[str, Any]:
    schema = ChartValues.model_json_schema(by_alias=True, mode="validation")
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "title": "llama-operator chart values",
        **schema,
    }


def render_values_schema() -> str:
    return json.dumps(values_schema(), indent=2, sort_keys=True) + "\n"


# docs/install.md's values reference, between these markers, is generated from the same schema.
VALUES_REFERENCE_DOC = "docs/install.md"
REFERENCE_BEGIN = "<!-- values reference: generated by `make crd` from api/chart_values.py; do not edit -->"
REFERENCE_END = "<!-- end of the values reference -->"


def _type_name(prop: dict[str, Any]) -> str:
    if "enum" in prop:
        return " \\| ".join(f"`{v}`" for v in prop["enum"])
    if "anyOf" in prop and "type" not in prop:  # with a type, anyOf only bounds it (0 or at least 1)
        return " or ".join(_type_name(p) for p in prop["anyOf"])
    kind = prop.get("type")
    if kind == "array":
        return f"list of {_type_name(prop.get('items') or {})}"
    if kind == "object" or "$ref" in prop:
        extra = prop.get("additionalProperties")
        return f"map of {_type_name(extra)}" if isinstance(extra, dict) and extra else "object"
    return str(kind or "any")


def values_reference_rows(chart_defaults: dict[str, Any]) -> list[tuple[str, str, str, str]]:
    """(key, type, default, description) for every leaf value; defaults are the chart's (values.yaml),
    the operator's own where values.yaml leaves a setting out."""
    schema = values_schema()
    defs: dict[str, Any] = schema["$defs"]
    defaults = ChartValues.model_validate(chart_defaults).model_dump(by_alias=True, mode="json")
    rows: list[tuple[str, str, str, str]] = []

    def walk(properties: dict[str, Any], values: dict[str, Any], prefix: str) -> None:
        for key, prop in properties.items():
            ref = prop.get("$ref", "")
            target = defs.get(ref.removeprefix("#/$defs/")) if ref else None
            if target is not None and "properties" in target:
                walk(target["properties"], values.get(key) or {}, f"{prefix}{key}.")
                continue
            default = json.dumps(values.get(key), separators=(", ", ": "))
            description = " ".join(str(prop.get("description", "")).split())
            for raw, escaped in (("|", "\\|"), ("<", "&lt;"), (">", "&gt;")):  # table cell, not HTML
                description = description.replace(raw, escaped)
            rows.append((f"{prefix}{key}", _type_name(prop), f"`{default}`", description))

    walk(schema["properties"], defaults, "")
    return rows


def render_values_reference(chart_defaults: dict[str, Any]) -> str:
    lines = [REFERENCE_BEGIN, "", "| Key | Type | Default | Description |", "|---|---|---|---|"]
    lines += [f"| `{k}` | {t} | {d} | {desc} |" for k, t, d, desc in values_reference_rows(chart_defaults)]
    return "\n".join([*lines, "", REFERENCE_END])


def with_values_reference(doc: str, chart_defaults: dict[str, Any]) -> str:
    """The document with its generated values reference replaced by the current one."""
    head, found, rest = doc.partition(REFERENCE_BEGIN)
    _, found_end, tail = rest.partition(REFERENCE_END)
    if not found or not found_end:
        raise ValueError(f"{VALUES_REFERENCE_DOC} has no {REFERENCE_BEGIN!r} ... {REFERENCE_END!r} section")
    return head + render_values_reference(chart_defaults) + tail
