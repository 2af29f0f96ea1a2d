"""Reconcile a LlamaService: plan, build, apply, report. Bad specs are reported, never retried hot."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any, cast

import kopf
from kubernetes.client.exceptions import ApiException

from llama_operator.api.spec import GROUP, PLURAL, VERSION
from llama_operator.handlers.indexes import OwnerKey, one
from llama_operator.infra.execute import execute, set_deployment_replicas
from llama_operator.planning.inventory import inventory_from_nodes
from llama_operator.reconcile.outcome import ReconcileOutcome, reconcile

RETRY_DELAY_SECONDS = 15


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


def apply_outcome(
    body: Mapping[str, Any], outcome: ReconcileOutcome, memo: kopf.Memo, deployment: dict[str, Any] | None
) -> dict[str, Any]:
    """Act on a computed outcome; returns the status patch. Shared by reconcile and drift repair."""
    if outcome.desired is None:
        kopf.warn(
            kopf.Body(cast("kopf.RawBody", dict(body))),
            reason="InvalidSpec",
            message=outcome.error or "invalid spec",
        )
        return outcome.status_patch
    meta = body["metadata"]
    execute(
        memo.kube, outcome.desired, namespace=meta["namespace"], field_manager=memo.settings.field_manager
    )
    autoscaling = (body.get("spec") or {}).get("autoscaling") or {}
    if autoscaling.get("enabled", True) and autoscaling:
        # The autoscaler owns replicas; until its first decision keep them inside the bounds.
        current = int(((deployment or {}).get("spec") or {}).get("replicas") or 0)
        lo, hi = int(autoscaling.get("minReplicas", 1)), int(autoscaling.get("maxReplicas", 8))
        if not lo <= current <= hi:
            set_deployment_replicas(
                memo.kube,
                namespace=meta["namespace"],
                name=meta["name"],
                replicas=min(max(current, lo), hi),
                field_manager=memo.settings.autoscaler_field_manager,
            )
    return outcome.status_patch


@kopf.on.resume(GROUP, VERSION, PLURAL)
@kopf.on.create(GROUP, VERSION, PLURAL)
@kopf.on.update(GROUP, VERSION, PLURAL, field="spec")  # type: ignore[arg-type]  # index kwargs
def reconcile_llamaservice(
    *,
    body: kopf.Body,
    namespace: str | None,
    name: str,
    memo: kopf.Memo,
    patch: kopf.Patch,
    node_index: kopf.Index[str, dict[str, Any]],
    deployment_index: kopf.Index[OwnerKey, dict[str, Any]],
    **_: Any,
) -> None:
    try:
        outcome = compute_outcome(body, memo, node_index)
        status = apply_outcome(body, outcome, memo, one(deployment_index, (str(namespace), name)))
    except ApiException as err:
        raise kopf.TemporaryError(
            f"Kubernetes API: {err.status} {err.reason}", delay=RETRY_DELAY_SECONDS
        ) from err
    patch.status.update(status)
