"""The router's demand reports: a Lease per LlamaService in the router's (the operator's) namespace, which
the operator copies onto the LlamaService's annotations. The router so needs no write access in any tenant's
namespace, and a tenant cannot fake another's demand (only the router may write Leases there)."""

from __future__ import annotations

import logging
from typing import Any

import kopf
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from llama_operator.api.spec import GROUP, PLURAL, VERSION
from llama_operator.desired.labels import (
    ACTIVATION_ANNOTATIONS,
    DEMAND_LABEL,
    DEMAND_NAME_ANNOTATION,
    DEMAND_NAMESPACE_ANNOTATION,
    DEMAND_UID_ANNOTATION,
)
from llama_operator.handlers.memo import OperatorMemo

log = logging.getLogger(__name__)


def demand_patch(lease_annotations: dict[str, str], current: dict[str, str]) -> dict[str, str]:
    """The activation annotations the Lease carries that the LlamaService does not have yet."""
    return {k: v for k, v in lease_annotations.items() if k in ACTIVATION_ANNOTATIONS and current.get(k) != v}


@kopf.on.event("coordination.k8s.io", "v1", "leases", labels={DEMAND_LABEL: "true"})
def demand_lease_event(
    *, event: kopf.RawEvent, body: kopf.Body, namespace: str | None, memo: OperatorMemo, **_: Any
) -> None:
    settings = memo.settings
    if (
        event.get("type") == "DELETED"
        or not settings.activator_service
        or namespace != settings.activator_namespace
    ):
        return  # a demand Lease anywhere else is no router's
    annotations = dict(body.metadata.annotations or {})
    target_ns = annotations.get(DEMAND_NAMESPACE_ANNOTATION)
    target = annotations.get(DEMAND_NAME_ANNOTATION)
    uid = annotations.get(DEMAND_UID_ANNOTATION)
    if not target_ns or not target or not uid:
        return
    api = client.CustomObjectsApi(memo.kube.api_client)
    try:
        current = api.get_namespaced_custom_object(GROUP, VERSION, target_ns, PLURAL, target)
    except ApiException as err:
        if err.status != 404:
            log.warning("demand for %s/%s: %s %s", target_ns, target, err.status, err.reason)
        return
    if current["metadata"].get("uid") != uid:
        return  # deleted and re-created since: not the service that had the demand
    patch = demand_patch(annotations, current["metadata"].get("annotations") or {})
    if not patch:
        return
    try:  # the uid as precondition, as the activator's own patch had it
        api.patch_namespaced_custom_object(
            GROUP, VERSION, target_ns, PLURAL, target, {"metadata": {"uid": uid, "annotations": patch}}
        )
    except ApiException as err:
        log.warning("demand for %s/%s: %s %s", target_ns, target, err.status, err.reason)
