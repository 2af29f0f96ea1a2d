"""Perform a DesiredState: create what is missing, update what this LlamaService controls, delete what it
controls and must not exist, and never touch anything else (create, never adopt)."""

from __future__ import annotations

import json
import logging
from typing import Any

from kubernetes.client.exceptions import ApiException

from llama_operator.desired.objects import DesiredState, Manifest
from llama_operator.infra.kube import Kube
from llama_operator.reconcile.execution import ExecutionReport, ObjectRef, Rejection, is_permanent_refusal
from llama_operator.reconcile.ownership import Ownership, object_uid, ownership

log = logging.getLogger(__name__)


def api_message(err: ApiException) -> str:
    """The API server's own message (a Status object's `message`), else the HTTP reason."""
    try:
        body = json.loads(err.body or "{}")
    except (TypeError, ValueError):
        body = {}
    message = body.get("message") if isinstance(body, dict) else None
    return str(message or err.reason or f"HTTP {err.status}")


def _converge(kube: Kube, manifest: Manifest, *, owner_uid: str, field_manager: str) -> dict[str, Any] | None:
    """Create or update one object; None when someone else has its name."""
    meta = manifest["metadata"]
    api_version, kind = manifest["apiVersion"], manifest["kind"]
    live = kube.get(api_version, kind, namespace=meta["namespace"], name=meta["name"])
    state = ownership(live, owner_uid)
    if state is Ownership.ABSENT:
        try:
            return kube.create(manifest, field_manager=field_manager)
        except ApiException as err:
            if err.status != 409:
                raise
            # Created by someone else since our read: look again.
            live = kube.get(api_version, kind, namespace=meta["namespace"], name=meta["name"])
            state = ownership(live, owner_uid)
    if state is Ownership.OURS and live is not None:
        return kube.apply(manifest, field_manager=field_manager, uid=str(object_uid(live)))
    return None


def execute(
    kube: Kube, desired: DesiredState, *, namespace: str, owner_uid: str, field_manager: str
) -> ExecutionReport:
    """Act on every object in order. A name taken by someone else, or a write the API server refuses for
    good (a 4xx other than 409/429), is reported and the other objects still converge; anything else that
    fails (a conflict, a timeout, a 5xx) is raised so the caller retries."""
    report = ExecutionReport()
    for manifest in desired.objects:
        ref = ObjectRef(manifest["kind"], namespace, manifest["metadata"]["name"])
        try:
            applied = _converge(kube, manifest, owner_uid=owner_uid, field_manager=field_manager)
        except ApiException as err:
            if not is_permanent_refusal(err.status):
                raise
            report.rejections.append(Rejection(ref, int(err.status), api_message(err)))
            continue
        if applied is None:
            report.conflicts.append(ref)
        else:
            report.applied.append(applied)
    for api_version, kind, name in desired.absent:
        if not kube.has_kind(api_version, kind):
            continue
        live = kube.get(api_version, kind, namespace=namespace, name=name)
        if ownership(live, owner_uid) is Ownership.OURS and live is not None:
            kube.delete(api_version, kind, namespace=namespace, name=name, uid=str(object_uid(live)))
    return report


def set_deployment_replicas(
    kube: Kube, *, namespace: str, name: str, uid: str, replicas: int, field_manager: str
) -> None:
    """Apply only spec.replicas of the Deployment with this uid (one this LlamaService controls), under the
    autoscaler's own field manager (the one writer of that field)."""
    kube.apply(
        {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {"replicas": replicas},
        },
        field_manager=field_manager,
        uid=uid,
    )
