"""Operator configuration (set by the platform team through Helm values / environment)."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel


class Settings(BaseModel):
    """Everything the operator reads from its own configuration; pure data, parsed at the edge."""

    model_config = ConfigDict(frozen=True, extra="forbid", alias_generator=to_camel, populate_by_name=True)

    mig_strategy: Literal["mixed", "single"] = "mixed"
    price_overrides: dict[str, float] = Field(default_factory=dict)
    gpu_image: str | None = None
    allowed_image_prefixes: Annotated[
        list[str],
        Field(
            description="Image policy: prefixes (registry/repository) that spec.engine.image must start with; "
            "empty allows any image. The operator's own default images are always allowed."
        ),
    ] = Field(default_factory=list)
    cpu_image: str | None = None
    field_manager: str = "llama-operator"
    autoscaler_field_manager: str = "llama-operator-autoscaler"
    pod_annotations: dict[str, str] = Field(default_factory=dict)
    prometheus_url: str = "http://prometheus-operated.monitoring.svc:9090"
    service_label: Annotated[str, Field(description="Prometheus label naming the LlamaService.")] = (
        "llamaservice"
    )
    namespace_label: str = "namespace"
    autoscale_interval_seconds: float = 5.0
    signal_window_seconds: float = 60.0
    pod_monitor: Literal["auto", "always", "never"] = "auto"
    startup_timeout_seconds: int = 1200
    termination_grace_seconds: int = 120
    status_refresh_seconds: Annotated[
        float,
        Field(
            description="The autoscaler writes observations (TTFT, queue, rates) into status at most this "
            "often; decisions and condition changes are written at once.",
            gt=0,
        ),
    ] = 60.0
    resync_seconds: Annotated[
        float, Field(description="Every LlamaService is reconciled at least this often.", gt=0)
    ] = 300.0
    reconcile_workers: Annotated[int, Field(description="LlamaServices reconciled at once.", ge=1, le=64)] = 4
    leader_election: Annotated[
        bool, Field(description="Elect one active instance on a Lease (run several replicas for failover).")
    ] = True
    leader_election_namespace: Annotated[
        str, Field(description="Namespace of the Lease; in a pod, the operator's own (POD_NAMESPACE).")
    ] = "default"
    leader_election_lease: str = "llama-operator"
    leader_lease_seconds: Annotated[
        float, Field(description="A standby takes over this long after the leader's last renewal.", ge=2)
    ] = 10.0
    leader_renew_seconds: Annotated[float, Field(gt=0)] = 2.0
    health_port: Annotated[
        int, Field(description="Port of /healthz and /readyz (0: off).", ge=0, le=65535)
    ] = 8080
    metrics_port: Annotated[
        int, Field(description="Port of the operator's Prometheus /metrics (0: off).", ge=0, le=65535)
    ] = 8081
    listen_address: Annotated[
        str, Field(description="Address the health and metrics ports listen on.", min_length=1)
    ] = "0.0.0.0"
