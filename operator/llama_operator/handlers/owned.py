"""Watch the objects a LlamaService owns: mirror the rollout into its status, repair drift."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any, cast

import kopf

from llama_operator.desired.labels import SERVICE_LABEL
from llama_operator.handlers.indexes import OwnerKey, one, owned_deployment
from llama_operator.handlers.llamaservice import OutcomeNotReached, apply_outcome, compute_outcome
from llama_operator.reconcile.drift import drifted, is_subset
from llama_operator.reconcile.ownership import Ownership, ownership
from llama_operator.reconcile.rollout import rollout_status


def _owner(
    llamaservice_index: kopf.Index[OwnerKey, dict[str, Any]], namespace: str, labels: kopf.Labels
) -> dict[str, Any] | None:
    return one(llamaservice_index, (namespace, labels.get(SERVICE_LABEL, "")))


def _repair_if_drifted(
    *,
    owner: dict[str, Any],
    live: dict[str, Any] | None,
    kind: str,
    memo: kopf.Memo,
    node_index: kopf.Index[str, dict[str, Any]],
    deployment: dict[str, Any] | None,
    logger: kopf.Logger,
) -> None:
    outcome = compute_outcome(owner, memo, node_index)
    if outcome.desired is None:
        return
    wanted = next((o for o in outcome.desired.objects if o["kind"] == kind), None)
    if wanted is not None and drifted(wanted, live):
        logger.info("%s drifted from the LlamaService; re-applying", kind)
        kopf.info(
            kopf.Body(cast("kopf.RawBody", owner)),
            reason="DriftRepaired",
            message=f"{kind} differed from the spec; re-applied",
        )
        try:
            apply_outcome(owner, outcome, memo, deployment)
        except OutcomeNotReached as err:
            logger.warning("%s not repaired: %s", kind, err)


@kopf.on.event("apps", "v1", "deployments", labels={SERVICE_LABEL: kopf.PRESENT})  # type: ignore[arg-type]  # index kwargs
def deployment_changed(
    *,
    event: kopf.RawEvent,
    body: kopf.Body,
    namespace: str | None,
    labels: kopf.Labels,
    memo: kopf.Memo,
    llamaservice_index: kopf.Index[OwnerKey, dict[str, Any]],
    node_index: kopf.Index[str, dict[str, Any]],
    pod_index: kopf.Index[OwnerKey, dict[str, Any]],
    logger: kopf.Logger,
    **_: Any,
) -> None:
    owner = _owner(llamaservice_index, str(namespace), labels)
    if owner is None or owner["metadata"].get("deletionTimestamp"):
        return
    live = None if event.get("type") == "DELETED" else dict(body)
    if live is not None and ownership(live, owner["metadata"].get("uid", "")) is not Ownership.OURS:
        return  # a tenant's object with our label: not ours to repair or to read status from
    _repair_if_drifted(
        owner=owner,
        live=live,
        kind="Deployment",
        memo=memo,
        node_index=node_index,
        deployment=live,
        logger=logger,
    )
    _mirror_rollout(owner=owner, deployment=live, pod_index=pod_index, memo=memo)


@kopf.on.event("", "v1", "services", labels={SERVICE_LABEL: kopf.PRESENT})  # type: ignore[arg-type]  # index kwargs
def service_changed(
    *,
    event: kopf.RawEvent,
    body: kopf.Body,
    namespace: str | None,
    labels: kopf.Labels,
    memo: kopf.Memo,
    llamaservice_index: kopf.Index[OwnerKey, dict[str, Any]],
    node_index: kopf.Index[str, dict[str, Any]],
    deployment_index: kopf.Index[OwnerKey, dict[str, Any]],
    logger: kopf.Logger,
    **_: Any,
) -> None:
    owner = _owner(llamaservice_index, str(namespace), labels)
    if owner is None or owner["metadata"].get("deletionTimestamp"):
        return
    live = None if event.get("type") == "DELETED" else dict(body)
    if live is not None and ownership(live, owner["metadata"].get("uid", "")) is not Ownership.OURS:
        return  # a tenant's object with our label: not ours to repair
    deployment = owned_deployment(
        deployment_index, (str(namespace), labels[SERVICE_LABEL]), owner["metadata"].get("uid")
    )
    _repair_if_drifted(
        owner=owner,
        live=live,
        kind="Service",
        memo=memo,
        node_index=node_index,
        deployment=deployment,
        logger=logger,
    )


@kopf.on.event("", "v1", "pods", labels={SERVICE_LABEL: kopf.PRESENT})  # type: ignore[arg-type]  # index kwargs
def pod_changed(
    *,
    namespace: str | None,
    labels: kopf.Labels,
    memo: kopf.Memo,
    llamaservice_index: kopf.Index[OwnerKey, dict[str, Any]],
    deployment_index: kopf.Index[OwnerKey, dict[str, Any]],
    pod_index: kopf.Index[OwnerKey, dict[str, Any]],
    **_: Any,
) -> None:
    owner = _owner(llamaservice_index, str(namespace), labels)
    if owner is None or owner["metadata"].get("deletionTimestamp"):
        return
    deployment = owned_deployment(
        deployment_index, (str(namespace), labels[SERVICE_LABEL]), owner["metadata"].get("uid")
    )
    _mirror_rollout(owner=owner, deployment=deployment, pod_index=pod_index, memo=memo)


def _mirror_rollout(
    *,
    owner: dict[str, Any],
    deployment: dict[str, Any] | None,
    pod_index: kopf.Index[OwnerKey, dict[str, Any]],
    memo: kopf.Memo,
) -> None:
    meta = owner["metadata"]
    key = (meta["namespace"], meta["name"])
    pods = list(pod_index.get(key, []))
    patch = rollout_status(
        owner.get("status"), deployment, pods, generation=meta.get("generation"), now=datetime.now(UTC)
    )
    if patch and not is_subset(patch, owner.get("status") or {}):
        memo.kube.patch_llamaservice_status(namespace=meta["namespace"], name=meta["name"], status=patch)
