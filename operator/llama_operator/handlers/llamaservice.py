"""Reconcile a LlamaService: plan, build, apply, report. Bad specs are reported, never retried hot."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any, cast

import kopf
from kubernetes.client.exceptions import ApiException

from llama_operator.api.spec import GROUP, PLURAL, VERSION
from llama_operator.handlers.indexes import OwnerKey, owned_deployment
from llama_operator.infra.execute import execute, set_deployment_replicas
from llama_operator.planning.inventory import inventory_from_nodes
from llama_operator.reconcile.execution import degraded_event, report_execution, retry_delay_seconds
from llama_operator.reconcile.outcome import ReconcileOutcome, reconcile
from llama_operator.reconcile.ownership import object_uid

RETRY_DELAY_SECONDS = 15


class OutcomeNotReached(kopf.TemporaryError):
    """Some objects could not be converged for a reason a retry soon cannot fix; status says which."""


def compute_outcome(
    body: Mapping[str, Any], memo: kopf.Memo, node_index: kopf.Index[str, dict[str, Any]]
) -> ReconcileOutcome:
    """What should exist for one LlamaService, from the indexed nodes (no API reads)."""
    nodes = [node for store in node_index.values() for node in store]
    return reconcile(
        body,
        memo.settings,
        inventory=inventory_from_nodes(nodes) if nodes else None,
        pod_monitor=memo.pod_monitor,
        now=datetime.now(UTC),
    )


def _post(body: Mapping[str, Any], status: Mapping[str, Any]) -> None:
    event = degraded_event(body.get("status"), status)
    if event is not None:
        kopf.warn(kopf.Body(cast("kopf.RawBody", dict(body))), reason=event.reason, message=event.message)


def _keep_replicas_in_bounds(
    body: Mapping[str, Any], memo: kopf.Memo, deployment: dict[str, Any] | None
) -> None:
    # The autoscaler owns replicas; until its first decision keep them inside the bounds.
    autoscaling = (body.get("spec") or {}).get("autoscaling") or {}
    if deployment is None or not autoscaling or not autoscaling.get("enabled", True):
        return
    meta = body["metadata"]
    current = int((deployment.get("spec") or {}).get("replicas") or 0)
    lo, hi = int(autoscaling.get("minReplicas", 1)), int(autoscaling.get("maxReplicas", 8))
    if not lo <= current <= hi:
        set_deployment_replicas(
            memo.kube,
            namespace=meta["namespace"],
            name=meta["name"],
            uid=str(object_uid(deployment)),
            replicas=min(max(current, lo), hi),
            field_manager=memo.settings.autoscaler_field_manager,
        )


def apply_outcome(
    body: Mapping[str, Any],
    outcome: ReconcileOutcome,
    memo: kopf.Memo,
    deployment: dict[str, Any] | None,
    *,
    attempt: int = 0,
) -> dict[str, Any]:
    """Act on a computed outcome; returns the status patch. Shared by reconcile and drift repair.

    Raises OutcomeNotReached (after writing status) when a name is taken or a write is refused for good,
    so kopf retries with a capped backoff instead of every few seconds."""
    if outcome.desired is None:
        _post(body, outcome.status_patch)
        return outcome.status_patch
    meta = body["metadata"]
    report = execute(
        memo.kube,
        outcome.desired,
        namespace=meta["namespace"],
        owner_uid=str(meta.get("uid") or ""),
        field_manager=memo.settings.field_manager,
    )
    _keep_replicas_in_bounds(body, memo, deployment)
    status = report_execution(
        body.get("status"),
        outcome.status_patch,
        report,
        now=datetime.now(UTC),
        generation=meta.get("generation"),
    )
    _post(body, status)
    if not report.clean:
        memo.kube.patch_llamaservice_status(namespace=meta["namespace"], name=meta["name"], status=status)
        delay = retry_delay_seconds(attempt)
        raise OutcomeNotReached(f"not converged, retrying in {delay:.0f}s (see status)", delay=delay)
    return status


@kopf.on.resume(GROUP, VERSION, PLURAL)
@kopf.on.create(GROUP, VERSION, PLURAL)
@kopf.on.update(GROUP, VERSION, PLURAL, field="spec")  # type: ignore[arg-type]  # index kwargs
def reconcile_llamaservice(
    *,
    body: kopf.Body,
    namespace: str | None,
    name: str,
    uid: str,
    retry: int,
    memo: kopf.Memo,
    patch: kopf.Patch,
    node_index: kopf.Index[str, dict[str, Any]],
    deployment_index: kopf.Index[OwnerKey, dict[str, Any]],
    **_: Any,
) -> None:
    try:
        outcome = compute_outcome(body, memo, node_index)
        deployment = owned_deployment(deployment_index, (str(namespace), name), uid)
        status = apply_outcome(body, outcome, memo, deployment, attempt=retry)
    except ApiException as err:
        raise kopf.TemporaryError(
            f"Kubernetes API: {err.status} {err.reason}", delay=RETRY_DELAY_SECONDS
        ) from err
    patch.status.update(status)
