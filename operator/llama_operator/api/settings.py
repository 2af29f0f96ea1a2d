"""Operator configuration (set by the platform team through Helm values / environment)."""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator
from pydantic.alias_generators import to_camel

from llama_operator.api.spec import (
    ACCELERATOR_NAME_PATTERN,
    BUILTIN_TYPES,
    DEFAULT_SLO_OBJECTIVE,
    MAX_OBJECTIVE,
    MIG_PROFILE_PATTERN,
    MIN_OBJECTIVE,
)

RESERVED_LABEL_PREFIXES = ("app.kubernetes.io/", "llama-operator.dev/")
# The same rule in the chart's values schema, so that `helm install` refuses it too.
NOT_RESERVED_KEYS: dict[str, Any] = {
    "propertyNames": {
        "not": {"pattern": "^(" + "|".join(p.replace(".", "\\.") for p in RESERVED_LABEL_PREFIXES) + ")"}
    }
}


# An http(s) URL with a host (no user:password@: credentials go in files). The same pattern in the chart's
# values schema (with `format: uri`), so that `helm install` refuses `notaurl` before a pod starts.
HTTP_URL_PATTERN = (
    r"^https?://([A-Za-z0-9]([-A-Za-z0-9.]*[A-Za-z0-9])?|\[[0-9A-Fa-f:.]+\])(:[0-9]{1,5})?([/?#]\S*)?$"
)

CREDENTIAL_HEADERS = ("authorization", "proxy-authorization", "cookie")
# A vLLM flag by its long name, or one key of a structured flag (--kv-transfer-config.kv_connector_module_path).
CODE_LOADING_FLAG_PATTERN = r"^--[a-z0-9][a-z0-9-]*(\.[a-z0-9_]+)?$"


def _any_case(word: str) -> str:
    return "".join(f"[{c.lower()}{c.upper()}]" if c.isalpha() else c for c in word)


# The same rule in the chart's values schema (JSON Schema patterns have no case-insensitive flag).
NO_CREDENTIAL_HEADERS: dict[str, Any] = {
    "propertyNames": {"not": {"pattern": "^(" + "|".join(_any_case(h) for h in CREDENTIAL_HEADERS) + ")$"}}
}


# The platforms whose own labels select a GPU node (catalog/platforms.py), and `auto`: read from the nodes.
PlatformName = Literal["auto", "gfd", "gke", "eks-karpenter", "aks", "custom"]
CloudPlatformName = Literal["gke", "eks-karpenter", "aks", "custom"]


class MigProfileSettings(BaseModel):
    """One MIG profile of a platform-defined GPU (NVIDIA's MIG user guide for that GPU)."""

    model_config = ConfigDict(frozen=True, extra="forbid", alias_generator=to_camel, populate_by_name=True)

    name: Annotated[str, Field(description="Profile name, e.g. 1g.18gb.", pattern=MIG_PROFILE_PATTERN)]
    compute_slices: Annotated[int, Field(description="Compute slices of 7 (the g in 1g).", ge=1, le=7)]
    memory_slices: Annotated[int, Field(description="Memory slices of 8.", ge=1, le=8)]
    memory_mib: Annotated[
        int,
        Field(alias="memoryMiB", description="Slice memory, MiB (as GPU Feature Discovery labels it).", gt=0),
    ]


class AcceleratorSettings(BaseModel):
    """An accelerator the platform adds to the catalog, or the fields of a built-in one it overrides.
    A new one needs memoryMiB, bandwidthGBps, fp16Tflops, computeCapability, pricePerHour and
    productLabels; an override only the fields it changes."""

    model_config = ConfigDict(frozen=True, extra="forbid", alias_generator=to_camel, populate_by_name=True)

    display_name: Annotated[str | None, Field(description="Human name, e.g. NVIDIA H20 96GB.")] = None
    memory_mib: Annotated[
        int | None,
        Field(
            alias="memoryMiB",
            description="Device memory as nvidia-smi reports it (nvidia.com/gpu.memory), MiB.",
            gt=0,
        ),
    ] = None
    bandwidth_gbps: Annotated[
        float | None,
        Field(alias="bandwidthGBps", description="Memory bandwidth, GB/s (the data sheet's).", gt=0),
    ] = None
    fp16_tflops: Annotated[
        float | None,
        Field(description="Dense FP16 tensor TFLOPS (the data sheet's sparse figure halved).", gt=0),
    ] = None
    compute_capability: Annotated[
        str | None,
        Field(
            description="CUDA compute capability, e.g. '8.9' (bf16 from 8.0, FP8 from 8.9).",
            pattern=r"^[0-9]+\.[0-9]$",
        ),
    ] = None
    price_per_hour: Annotated[
        float | None,
        Field(description="Price of one GPU-hour (only ratios between accelerators matter).", ge=0),
    ] = None
    product_labels: Annotated[
        list[Annotated[str, Field(min_length=1, max_length=63)]] | None,
        Field(
            description="nvidia.com/gpu.product values of nodes with this GPU (kubectl get nodes -L "
            "nvidia.com/gpu.product); the first is used where no node is listed.",
            min_length=1,
        ),
    ] = None
    mig_profiles: Annotated[
        list[MigProfileSettings] | None, Field(description="Its MIG profiles (none: no MIG).")
    ] = None
    node_labels: Annotated[
        dict[CloudPlatformName, dict[Annotated[str, Field(min_length=1, max_length=316)], str]] | None,
        Field(
            description="Labels a node with this GPU carries on each platform, which vLLM pods select when "
            "config.platform is that platform, e.g. {gke: {cloud.google.com/gke-accelerator: nvidia-h20}, "
            "custom: {pool: h20}}; they replace the built-in ones for the platforms given."
        ),
    ] = None

    @model_validator(mode="after")
    def _consistent_mig_profiles(self) -> AcceleratorSettings:
        # What the planner would otherwise take on trust: a slice bigger than its GPU plans a model that
        # never fits, a profile listed twice is matched against nodes by either entry.
        names = [p.name for p in self.mig_profiles or ()]
        for twice in sorted({n for n in names if names.count(n) > 1}):
            raise ValueError(f"migProfiles lists {twice} twice")
        for profile in self.mig_profiles or ():
            stated = int(profile.name.split("g.", 1)[0])
            if stated != profile.compute_slices:
                raise ValueError(
                    f"migProfiles: {profile.name} has {profile.compute_slices} compute slices, its name says "
                    f"{stated}"
                )
            if self.memory_mib is not None and profile.memory_mib > self.memory_mib:
                raise ValueError(
                    f"migProfiles: {profile.name} has more memory than the GPU ({profile.memory_mib} MiB > "
                    f"memoryMiB {self.memory_mib})"
                )
        return self


# A new accelerator needs these (an override of a built-in one may give any subset).
REQUIRED_FOR_NEW = (
    "memory_mib",
    "bandwidth_gbps",
    "fp16_tflops",
    "compute_capability",
    "price_per_hour",
    "product_labels",
)

# The shortest interval the operator waits on: under a second its loops run back to back (the autoscaler's
# Prometheus queries, the resync's reconciles, the status writes, the Lease renewals). Intervals that 0 turns
# off are 0 or at least this.
INTERVAL_FLOOR_SECONDS = 1.0
# The same rule in the chart's values schema for an interval that 0 turns off.
ZERO_OR_AT_LEAST_A_SECOND: dict[str, Any] = {
    "anyOf": [{"const": 0}, {"minimum": INTERVAL_FLOOR_SECONDS}],
}

NOT_ACCELERATORS = ("auto", "cpu")  # auto chooses; cpu is vLLM's CPU build


def _new_accelerators_complete(schema: dict[str, Any]) -> None:
    """config.accelerators in the chart's values schema: a built-in type's entry may override any of its
    fields, a new type's must give every field REQUIRED_FOR_NEW names (what the Settings validator checks),
    so that `helm install` refuses an incomplete GPU instead of the operator stopping on it."""
    ((pattern, entry),) = schema.pop("patternProperties").items()
    required = [AcceleratorSettings.model_fields[f].alias or to_camel(f) for f in REQUIRED_FOR_NEW]
    schema["propertyNames"] = {**schema.get("propertyNames", {}), "pattern": pattern}
    schema["propertyNames"]["not"] = {"enum": list(NOT_ACCELERATORS)}
    schema["properties"] = dict.fromkeys(sorted(BUILTIN_TYPES - set(NOT_ACCELERATORS)), entry)
    schema["additionalProperties"] = {"allOf": [entry], "required": required}


# How often the PodMonitors the operator creates have vLLM scraped: the burst window's default.
POD_MONITOR_SCRAPE_SECONDS = 5.0
# The fewest scrape intervals a rate window may span (Grafana's $__rate_interval rule).
SCRAPES_PER_SIGNAL_WINDOW = 4
# The autoscaler's rate window: four of the PodMonitor's scrapes. The simulator's policy reads the same
# constant, so the benchmarks measure the window the operator ships with.
SIGNAL_WINDOW_SECONDS = SCRAPES_PER_SIGNAL_WINDOW * POD_MONITOR_SCRAPE_SECONDS


class Settings(BaseModel):
    """Everything the operator reads from its own configuration; pure data, parsed at the edge."""

    model_config = ConfigDict(frozen=True, extra="forbid", alias_generator=to_camel, populate_by_name=True)

    platform: Annotated[
        PlatformName,
        Field(
            description="Whose node labels vLLM pods select their GPU by: gfd (nvidia.com/gpu.product, "
            "written by the GPU Operator once a node runs), gke (cloud.google.com/gke-accelerator), "
            "eks-karpenter (karpenter.k8s.aws/instance-gpu-name), aks (kubernetes.azure.com/accelerator and "
            "the VM size), custom (config.accelerators' nodeLabels.custom), or auto: the cloud labels the "
            "nodes carry, else gfd. A node provisioner creates nodes only for labels it knows before launch."
        ),
    ] = "auto"
    mig_strategy: Annotated[
        Literal["mixed", "single"],
        Field(
            description="As the NVIDIA GPU Operator's MIG strategy is set: mixed (a resource per MIG profile, "
            "nvidia.com/mig-1g.10gb) or single (MIG slices as nvidia.com/gpu)."
        ),
    ] = "mixed"
    price_overrides: Annotated[
        dict[str, float],
        Field(
            description="Price per GPU-hour by accelerator type (or type/MIG profile), e.g. {t4: 0.35, "
            "a100/1g.10gb: 0.5}: replaces the catalog's list price when planning and in the cost figures."
        ),
    ] = Field(default_factory=dict)
    accelerators: Annotated[
        dict[Annotated[str, Field(pattern=ACCELERATOR_NAME_PATTERN, max_length=63)], AcceleratorSettings],
        Field(
            description="Accelerators added to the catalog, or fields of built-in ones overridden, by type name "
            "(e.g. {h20: {memoryMiB: 97871, bandwidthGBps: 4000, fp16Tflops: 148, computeCapability: '9.0', "
            "pricePerHour: 2.0, productLabels: [NVIDIA-H20]}}): accelerator.type auto then uses nodes with "
            "those product labels, and a LlamaService may name the type. No operator release needed.",
            json_schema_extra=_new_accelerators_complete,
        ),
    ] = Field(default_factory=dict)
    gpu_image: Annotated[
        str | None,
        Field(
            description="vLLM image for GPU LlamaServices without spec.engine.image (default: the pinned one)."
        ),
    ] = None
    allowed_image_prefixes: Annotated[
        list[str],
        Field(
            description="Image policy: prefixes (registry/repository) that spec.engine.image must start with; "
            "empty allows any image. The operator's own default images are always allowed."
        ),
    ] = Field(default_factory=list)
    cpu_image: Annotated[
        str | None,
        Field(description="vLLM image for accelerator type cpu (default: the pinned CPU build)."),
    ] = None
    # Code-loading flags are the platform's decision: with them a tenant runs any code the image can import
    # (or a file on its cache volume), whatever the image policy says.
    allowed_code_loading_flags: Annotated[
        list[Annotated[str, Field(pattern=CODE_LOADING_FLAG_PATTERN, max_length=128)]],
        Field(
            description="vLLM flags that import or load code (--middleware, --logits-processors, "
            "--worker-cls, --tool-parser-plugin, ...; the flag contract marks them) that "
            "spec.engine.extraArgs may use, by name, or one key of a structured flag "
            "(--kv-transfer-config.kv_connector_module_path). Empty: every such flag is refused."
        ),
    ] = Field(default_factory=list)
    allow_trust_remote_code: Annotated[
        bool,
        Field(
            description="Whether a LlamaService may set spec.model.trustRemoteCode (vLLM's --trust-remote-code: "
            "run the Python code a model repository ships). Off: such a LlamaService is Degraded."
        ),
    ] = False
    field_manager: Annotated[
        str, Field(description="Field manager of the operator's server-side applies.")
    ] = "llama-operator"
    autoscaler_field_manager: Annotated[
        str, Field(description="Field manager of the autoscaler's replica writes.")
    ] = "llama-operator-autoscaler"
    pod_annotations: Annotated[
        dict[str, str], Field(description="Annotations on every vLLM pod the operator creates.")
    ] = Field(default_factory=dict)
    pod_labels: Annotated[
        dict[str, str],
        Field(
            description="Labels on every vLLM pod the operator creates (cost allocation, policy engines). "
            "The operator's own labels (app.kubernetes.io/*, llama-operator.dev/*) cannot be set here.",
            json_schema_extra=NOT_RESERVED_KEYS,
        ),
    ] = Field(default_factory=dict)
    image_pull_secrets: Annotated[
        list[Annotated[str, Field(min_length=1, max_length=253)]],
        Field(
            description="Secrets (in each LlamaService's namespace) for pulling vLLM images from a private registry."
        ),
    ] = Field(default_factory=list)
    priority_class_name: Annotated[
        str | None,
        Field(description="PriorityClass of every vLLM pod (GPU pods usually outrank batch work)."),
    ] = None
    runtime_class_name: Annotated[
        str | None,
        Field(
            description="RuntimeClass of every vLLM pod (e.g. nvidia, where the GPU runtime is not the default)."
        ),
    ] = None
    # Scheduling defaults of every vLLM pod (a dedicated GPU pool's taint and label, spot avoidance...): the
    # plan's own placement (GPU product, MIG state, the GPU toleration) is added to them, never replaced.
    pod_node_selector: Annotated[
        dict[str, str],
        Field(
            description="nodeSelector of every vLLM pod (e.g. {pool: inference}); the planner's GPU product "
            "label is added to it."
        ),
    ] = Field(default_factory=dict)
    pod_tolerations: Annotated[
        list[dict[str, Any]],
        Field(
            description="Tolerations of every vLLM pod (e.g. a dedicated pool's taint), beside the "
            "nvidia.com/gpu toleration GPU pods get."
        ),
    ] = Field(default_factory=list)
    pod_affinity: Annotated[
        dict[str, Any],
        Field(
            description="The affinity field of every vLLM pod (nodeAffinity, podAffinity, podAntiAffinity). "
            "Required node terms are combined with the planner's (both must hold)."
        ),
    ] = Field(default_factory=dict)
    pod_monitor_labels: Annotated[
        dict[str, str],
        Field(
            description="Labels on the PodMonitors the operator creates, so that your Prometheus selects them "
            "(kube-prometheus-stack: release=<its release name>).",
            json_schema_extra=NOT_RESERVED_KEYS,
        ),
    ] = Field(default_factory=dict)
    prometheus_url: Annotated[
        str,
        Field(
            description="The Prometheus API (or Thanos, Mimir) the autoscaler reads vLLM's metrics from: an "
            "http:// or https:// URL.",
            pattern=HTTP_URL_PATTERN,
            json_schema_extra={"format": "uri"},
        ),
    ] = "http://prometheus-operated.monitoring.svc:9090"
    # The connection to a secured Prometheus. Secrets are files (mounted by the chart from Secrets), read
    # again when they change, so that no password or token is in this configuration, the args or the logs.
    prometheus_ca_file: Annotated[
        str | None,
        Field(
            description="PEM CA bundle that signed Prometheus's serving certificate (https URLs); default: "
            "the system's trust store. The chart mounts it from prometheus.ca.",
            min_length=1,
        ),
    ] = None
    prometheus_insecure_skip_verify: Annotated[
        bool,
        Field(
            description="Skip verifying Prometheus's TLS certificate (an explicit opt-out; not recommended)."
        ),
    ] = False
    prometheus_bearer_token_file: Annotated[
        str | None,
        Field(
            description="File holding a bearer token sent to Prometheus (re-read when it changes, as projected "
            "service-account tokens rotate), e.g. /var/run/secrets/kubernetes.io/serviceaccount/token. "
            "The chart mounts one from prometheus.bearerToken.",
            min_length=1,
        ),
    ] = None
    prometheus_basic_auth_username_file: Annotated[
        str | None,
        Field(
            description="File holding the basic-auth username; the chart mounts it from prometheus.basicAuth.",
            min_length=1,
        ),
    ] = None
    prometheus_basic_auth_password_file: Annotated[
        str | None,
        Field(
            description="File holding the basic-auth password; the chart mounts it from prometheus.basicAuth.",
            min_length=1,
        ),
    ] = None
    prometheus_headers: Annotated[
        dict[str, str],
        Field(
            description="Extra HTTP headers on every Prometheus query, e.g. {X-Scope-OrgID: team-a} for a "
            "multi-tenant Mimir, Cortex or Thanos. Not for credentials (this is no Secret): use the "
            "bearer-token or basic-auth files.",
            json_schema_extra=NO_CREDENTIAL_HEADERS,
        ),
    ] = Field(default_factory=dict)
    prometheus_timeout_seconds: Annotated[
        float, Field(description="Timeout of one Prometheus query (sent to Prometheus too).", gt=0, le=300)
    ] = 5.0
    service_label: Annotated[str, Field(description="Prometheus label naming the LlamaService.")] = (
        "llamaservice"
    )
    namespace_label: Annotated[
        str, Field(description="Prometheus label naming the LlamaService's namespace.")
    ] = "namespace"
    autoscale_interval_seconds: Annotated[
        float, Field(description="How often the autoscaler decides (at least 1).", ge=INTERVAL_FLOOR_SECONDS)
    ] = 5.0
    signal_window_seconds: Annotated[
        float,
        Field(
            description="Range of the autoscaler's rate and percentile queries: at least four scrape intervals "
            "(burstWindowSeconds), so that every rate has samples; unset, exactly four (20 s at the PodMonitor's "
            "5 s scrapes, the window `llama-bench` measures the policy with). A longer one reacts later.",
            ge=INTERVAL_FLOOR_SECONDS,
        ),
    ] = SIGNAL_WINDOW_SECONDS
    slo_objective: Annotated[
        float,
        Field(
            description="The platform's default SLO objective: the share of requests that must meet a "
            "LlamaService's TTFT (and TPOT) objective where its spec.autoscaling.slo.objective is unset. The "
            "burn-rate alerts, the dashboard and the autoscaler read the objective in force per service.",
            ge=MIN_OBJECTIVE,
            le=MAX_OBJECTIVE,
        ),
    ] = DEFAULT_SLO_OBJECTIVE
    burst_window_seconds: Annotated[
        float,
        Field(
            description="Scrape interval of vLLM's metrics (the PodMonitor's is 5 s): the autoscaler's burst "
            "response reads the request rate over the latest one and starts the replicas a sudden rise needs "
            "before the rate window has filled. 0: no burst response; else at least 1.",
            ge=0,
            le=60,
            json_schema_extra=ZERO_OR_AT_LEAST_A_SECOND,
        ),
    ] = POD_MONITOR_SCRAPE_SECONDS
    pod_monitor: Annotated[
        Literal["auto", "always", "never"],
        Field(
            description="A PodMonitor per LlamaService: auto while the Prometheus Operator's CRD is installed "
            "(followed while running), always, or never (prometheus.io scrape annotations instead)."
        ),
    ] = "auto"
    startup_timeout_seconds: Annotated[
        int,
        Field(description="How long a vLLM pod may take to load its model before its startup probe fails."),
    ] = 1200
    termination_grace_seconds: Annotated[
        int, Field(description="vLLM pods' grace period: in-flight requests drain this long on scale-down.")
    ] = 120
    engine_replan_interval_seconds: Annotated[
        float,
        Field(
            description="Where a service's replicas prove faster than the catalog's step estimates, its vLLM "
            "engine (--max-num-batched-tokens, --max-num-seqs) is re-planned for the measured hardware, which "
            "rolls its pods: at most once per this many seconds (at least 1). 0: never; engines keep the "
            "catalog's estimates.",
            ge=0,
            json_schema_extra=ZERO_OR_AT_LEAST_A_SECOND,
        ),
    ] = 3600.0
    engine_replan_min_observations: Annotated[
        float,
        Field(
            description="Observations (steady autoscaler evaluations, older ones discounted) the step "
            "calibration must hold before it re-plans an engine: about half its memory by default.",
            ge=1,
            le=100,
        ),
    ] = 50.0
    status_refresh_seconds: Annotated[
        float,
        Field(
            description="The autoscaler writes observations (TTFT, queue, rates) into status at most this "
            "often (at least 1); decisions and condition changes are written at once.",
            ge=INTERVAL_FLOOR_SECONDS,
        ),
    ] = 60.0
    status_refreshes_per_second: Annotated[
        float,
        Field(
            description="Fleet-wide cap on those observation refreshes (the oldest first): 1,000 served "
            "services at a 60 s refresh would write 17 statuses a second. Decisions and condition changes "
            "are not counted against it.",
            gt=0,
        ),
    ] = 5.0
    resync_seconds: Annotated[
        float,
        Field(
            description="Every LlamaService is reconciled at least this often (at least 1).",
            ge=INTERVAL_FLOOR_SECONDS,
        ),
    ] = 300.0
    reconcile_workers: Annotated[int, Field(description="LlamaServices reconciled at once.", ge=1, le=64)] = 4
    leader_election: Annotated[
        bool, Field(description="Elect one active instance on a Lease (run several replicas for failover).")
    ] = True
    leader_election_namespace: Annotated[
        str | None,
        Field(
            description="Namespace of the Lease. Unset: the operator's own namespace: POD_NAMESPACE in a pod "
            "(the chart sets it), else the ServiceAccount's namespace, else the kubeconfig context's "
            "namespace, else default.",
            min_length=1,
            max_length=63,
        ),
    ] = None
    leader_election_lease: Annotated[str, Field(description="Name of the Lease.")] = "llama-operator"
    leader_lease_seconds: Annotated[
        float, Field(description="A standby takes over this long after the leader's last renewal.", ge=2)
    ] = 10.0
    leader_renew_seconds: Annotated[
        float,
        Field(description="How often the leader renews its Lease (at least 1).", ge=INTERVAL_FLOOR_SECONDS),
    ] = 2.0
    activator_service: Annotated[
        str | None,
        Field(
            description="The activator's Service, in activatorNamespace (the chart's activator.enabled sets "
            "both). A LlamaService with minReplicas 0 goes to zero only while this Service has a ready "
            "endpoint: its traffic then goes to the activator, which holds requests while one replica "
            "starts. Unset: no LlamaService scales to zero.",
            min_length=1,
            max_length=63,
        ),
    ] = None
    activator_namespace: Annotated[
        str, Field(description="Namespace of the activator's Service (the chart's release namespace).")
    ] = "default"
    inference_pool: Annotated[
        Literal["auto", "never"],
        Field(
            description="An InferencePool (inference.networking.k8s.io/v1, Gateway API Inference Extension) per "
            "LlamaService: auto creates one whenever that CRD is served (followed while running: a CRD installed "
            "later gets every LlamaService its pool without a restart), never does not."
        ),
    ] = "auto"
    inference_pool_endpoint_picker: Annotated[
        str | None,
        Field(
            description="The Service of the endpoint picker (in each LlamaService's namespace) that every "
            "InferencePool names in spec.endpointPickerRef; unset: no endpointPickerRef.",
            min_length=1,
            max_length=253,
        ),
    ] = None
    inference_pool_endpoint_picker_port: Annotated[
        int, Field(description="The endpoint picker Service's ext_proc port.", ge=1, le=65535)
    ] = 9002
    inference_pool_failure_mode: Annotated[
        Literal["FailOpen", "FailClose"],
        Field(description="endpointPickerRef.failureMode: what the gateway does when the picker is down."),
    ] = "FailClose"
    health_port: Annotated[
        int, Field(description="Port of /healthz and /readyz (0: off).", ge=0, le=65535)
    ] = 8080
    metrics_port: Annotated[
        int, Field(description="Port of the operator's Prometheus /metrics (0: off).", ge=0, le=65535)
    ] = 8081
    listen_address: Annotated[
        str, Field(description="Address the health and metrics ports listen on.", min_length=1)
    ] = "0.0.0.0"

    @field_validator("accelerators")
    @classmethod
    def _complete_accelerators(
        cls, accelerators: dict[str, AcceleratorSettings]
    ) -> dict[str, AcceleratorSettings]:
        for name, given in accelerators.items():
            if name in NOT_ACCELERATORS:
                raise ValueError(
                    f"{name}: not an accelerator a platform can define (auto chooses; cpu is vLLM's CPU build)"
                )
            if name in BUILTIN_TYPES:
                continue  # an override: the built-in entry fills in the rest
            fields = AcceleratorSettings.model_fields
            missing = [fields[f].alias or to_camel(f) for f in REQUIRED_FOR_NEW if getattr(given, f) is None]
            if missing:
                raise ValueError(
                    f"{name}: a new accelerator needs {', '.join(missing)} (only an override of a built-in "
                    "type may leave fields out)"
                )
        return accelerators

    @field_validator("pod_labels", "pod_monitor_labels")
    @classmethod
    def _not_ours(cls, labels: dict[str, str]) -> dict[str, str]:
        taken = sorted(k for k in labels if k.startswith(RESERVED_LABEL_PREFIXES))
        if taken:
            raise ValueError(
                f"{', '.join(taken)}: labels under {' and '.join(RESERVED_LABEL_PREFIXES)} are the operator's "
                "own (its selectors use them); choose another key"
            )
        return labels

    @field_validator("prometheus_url", mode="before")
    @classmethod
    def _http_url(cls, url: object) -> object:
        # Before the pattern constraint: this message says what to give, the pattern's only that it failed.
        if isinstance(url, str) and not re.match(HTTP_URL_PATTERN, url):
            raise ValueError(
                f"{url!r} is not an http:// or https:// URL of the Prometheus API "
                "(e.g. http://prometheus-operated.monitoring.svc:9090)"
            )
        return url

    @field_validator("prometheus_headers")
    @classmethod
    def _no_credentials_in_headers(cls, headers: dict[str, str]) -> dict[str, str]:
        secret = sorted(k for k in headers if k.lower() in CREDENTIAL_HEADERS)
        if secret:
            raise ValueError(
                f"{', '.join(secret)}: credentials do not belong in the configuration (a ConfigMap); use "
                "prometheusBearerTokenFile or prometheusBasicAuthUsernameFile/PasswordFile (the chart's "
                "prometheus.bearerToken or prometheus.basicAuth mount them from a Secret)"
            )
        return headers

    @field_validator("burst_window_seconds", "engine_replan_interval_seconds")
    @classmethod
    def _zero_or_at_least_a_second(cls, seconds: float) -> float:
        if 0 < seconds < INTERVAL_FLOOR_SECONDS:
            raise ValueError(f"0 (off) or at least {INTERVAL_FLOOR_SECONDS:g} s, not {seconds:g}")
        return seconds

    @model_validator(mode="before")
    @classmethod
    def _signal_window_follows_the_scrapes(cls, data: Any) -> Any:
        # Unset, the window is four scrape intervals: a stated burstWindowSeconds (the scrape interval)
        # moves it along, rather than leaving a 20 s window over scrapes that are further apart.
        if not isinstance(data, dict) or {"signal_window_seconds", "signalWindowSeconds"} & data.keys():
            return data
        scrape = data.get("burst_window_seconds", data.get("burstWindowSeconds"))
        if isinstance(scrape, int | float) and not isinstance(scrape, bool) and scrape > 0:
            return {**data, "signal_window_seconds": SCRAPES_PER_SIGNAL_WINDOW * float(scrape)}
        return data

    @model_validator(mode="after")
    def _signal_window_spans_scrapes(self) -> Settings:
        # rate() over fewer than two samples is empty: a window of a scrape or two reads no load at times.
        scrape = self.burst_window_seconds
        if scrape > 0 and self.signal_window_seconds < SCRAPES_PER_SIGNAL_WINDOW * scrape:
            raise ValueError(
                f"signalWindowSeconds {self.signal_window_seconds:g} is under {SCRAPES_PER_SIGNAL_WINDOW} scrape "
                f"intervals (burstWindowSeconds {scrape:g}): set signalWindowSeconds to at least "
                f"{SCRAPES_PER_SIGNAL_WINDOW * scrape:g}, or burstWindowSeconds to the real scrape interval"
            )
        return self

    @model_validator(mode="after")
    def _one_prometheus_credential(self) -> Settings:
        basic = (self.prometheus_basic_auth_username_file, self.prometheus_basic_auth_password_file)
        if (basic[0] is None) != (basic[1] is None):
            raise ValueError(
                "prometheusBasicAuthUsernameFile and prometheusBasicAuthPasswordFile go together: set both "
                "(the chart's prometheus.basicAuth.secretName does) or neither"
            )
        if basic[0] is not None and self.prometheus_bearer_token_file is not None:
            raise ValueError(
                "prometheusBearerTokenFile and basic auth both set: Prometheus takes one Authorization "
                "header; keep one of them"
            )
        if self.prometheus_insecure_skip_verify and self.prometheus_ca_file is not None:
            raise ValueError(
                "prometheusInsecureSkipVerify with prometheusCaFile: the CA would be ignored; drop "
                "prometheusInsecureSkipVerify to verify against the CA"
            )
        return self
