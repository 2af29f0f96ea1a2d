"""The autoscaler: a timer per autoscaled LlamaService reads signals, asks the policy, scales the
Deployment (the only writer of its replicas) and records the decision in status."""

from __future__ import annotations

import time
from datetime import UTC, datetime
from typing import Any, cast

import kopf

from llama_operator.api.resource import InvalidSpecError, parse_spec
from llama_operator.api.spec import GROUP, PLURAL, VERSION
from llama_operator.autoscale.policy import decide
from llama_operator.autoscale.promql import ServiceKey, ServiceView
from llama_operator.autoscale.signals import Signals
from llama_operator.handlers.indexes import OwnerKey, owned_deployment
from llama_operator.infra.config import ConfigError, load_settings
from llama_operator.infra.execute import set_deployment_replicas
from llama_operator.reconcile.autoscaling import autoscale_outcome, autoscaler_state
from llama_operator.reconcile.ownership import object_uid


def _interval() -> float:
    try:
        return load_settings().autoscale_interval_seconds
    except (ConfigError, OSError):
        return 5.0  # start-up reports the configuration error itself


def _autoscaled(spec: kopf.Spec, **_: Any) -> bool:
    autoscaling = spec.get("autoscaling") or {}
    return bool(autoscaling) and bool(autoscaling.get("enabled", True))


def service_view(body: dict[str, Any], deployment: dict[str, Any] | None) -> ServiceView | None:
    """Replica counts from the Deployment; None until it exists."""
    if deployment is None:
        return None
    current = int((deployment.get("spec") or {}).get("replicas") or 0)
    ready = int((deployment.get("status") or {}).get("readyReplicas") or 0)
    slo = ((body.get("spec") or {}).get("autoscaling") or {}).get("slo") or {}
    return ServiceView(
        percentile=float(slo.get("percentile", 95)),
        ready_replicas=ready,
        starting_replicas=max(0, current - ready),
        current_replicas=current,
    )


def _all_views(
    llamaservice_index: kopf.Index[OwnerKey, dict[str, Any]],
    deployment_index: kopf.Index[OwnerKey, dict[str, Any]],
) -> dict[ServiceKey, ServiceView]:
    views: dict[ServiceKey, ServiceView] = {}
    for key, store in llamaservice_index.items():
        for body in store:
            uid = (body.get("metadata") or {}).get("uid")
            view = service_view(body, owned_deployment(deployment_index, key, uid))
            if view is not None and _autoscaled(spec=kopf.Spec(kopf.Body(cast("kopf.RawBody", body)))):
                views[key] = view
    return views


@kopf.timer(GROUP, VERSION, PLURAL, interval=_interval(), when=_autoscaled)  # type: ignore[arg-type]  # index kwargs
def autoscale(
    *,
    body: kopf.Body,
    namespace: str | None,
    name: str,
    memo: kopf.Memo,
    patch: kopf.Patch,
    llamaservice_index: kopf.Index[OwnerKey, dict[str, Any]],
    deployment_index: kopf.Index[OwnerKey, dict[str, Any]],
    **_: Any,
) -> None:
    if not memo.controller.leading:
        return  # a standby keeps its watches warm and decides nothing
    try:
        spec = parse_spec(body.spec)
    except InvalidSpecError:
        return  # reconcile reports a bad spec
    autoscaling = spec.autoscaling
    deployment = owned_deployment(deployment_index, (str(namespace), name), body.metadata.uid)
    view = service_view(dict(body), deployment)
    if autoscaling is None or view is None:
        return
    signals, error = memo.signals.get(
        (str(namespace), name), lambda: _all_views(llamaservice_index, deployment_index)
    )
    if signals is None:
        signals = Signals.no_data(
            ready_replicas=view.ready_replicas,
            starting_replicas=view.starting_replicas,
            current_replicas=view.current_replicas,
        )
    state = autoscaler_state(body.status)
    decision = decide(autoscaling, signals, state, time.time())
    outcome = autoscale_outcome(
        body.status,
        decision,
        signals,
        slo_ttft_seconds=autoscaling.slo.ttft_seconds,
        prometheus_error=error,
        generation=body.metadata.get("generation"),
        now=datetime.now(UTC),
    )
    if outcome.replicas is not None and deployment is not None:
        set_deployment_replicas(
            memo.kube,
            namespace=str(namespace),
            name=name,
            uid=str(object_uid(deployment)),
            replicas=outcome.replicas,
            field_manager=memo.settings.autoscaler_field_manager,
        )
    for event in outcome.events:
        (kopf.warn if event.warning else kopf.info)(body, reason=event.reason, message=event.message)
    patch.status.update(outcome.status_patch)
