"""Perform a DesiredState: create what is missing, repair what this LlamaService controls and has drifted,
delete what it controls and must not exist, and never touch anything else (create, never adopt).

Live objects come from the watch indexes when the caller has them, so a converged LlamaService costs no
API call at all; without them (tests, the CLI) each object is read first.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from typing import Any

from kubernetes.client.exceptions import ApiException

from llama_operator.desired.objects import DesiredState
from llama_operator.desired.pod import Manifest
from llama_operator.infra.kube import Kube
from llama_operator.reconcile.drift import Repair, repair_needed, spec_managers, writes_as_applied
from llama_operator.reconcile.execution import ExecutionReport, ObjectRef, Rejection, is_permanent_refusal
from llama_operator.reconcile.ownership import Ownership, object_uid, ownership

log = logging.getLogger(__name__)

# (kind, name) -> the live object as the index keeps it, or None when the index has no such object.
LiveLookup = Callable[[str, str], dict[str, Any] | None]


def api_message(err: ApiException) -> str:
    """The API server's own message (a Status object's `message`), else the HTTP reason."""
    try:
        body = json.loads(err.body or "{}")
    except (TypeError, ValueError):
        body = {}
    message = body.get("message") if isinstance(body, dict) else None
    return str(message or err.reason or f"HTTP {err.status}")


def _read(kube: Kube, manifest: Manifest) -> dict[str, Any] | None:
    meta = manifest["metadata"]
    live = kube.get(manifest["apiVersion"], manifest["kind"], namespace=meta["namespace"], name=meta["name"])
    if live is not None:
        live["metadata"]["specManagers"] = spec_managers(live["metadata"].get("managedFields"))
    return live


class _Executor:
    def __init__(
        self,
        kube: Kube,
        *,
        owner_uid: str,
        field_manager: str,
        own_managers: frozenset[str],
        live: LiveLookup | None,
        report: ExecutionReport,
    ) -> None:
        self.kube, self.owner_uid, self.field_manager = kube, owner_uid, field_manager
        self.own_managers = own_managers | {field_manager}
        self.live, self.report = live, report

    def lookup(self, manifest: Manifest) -> dict[str, Any] | None:
        if self.live is None:
            return _read(self.kube, manifest)
        return self.live(manifest["kind"], manifest["metadata"]["name"])

    def converge(self, manifest: Manifest) -> bool:
        """Create or repair one object; False when someone else has its name."""
        live = self.lookup(manifest)
        state = ownership(live, self.owner_uid)
        if state is Ownership.ABSENT:
            try:
                created = self.kube.create(manifest, field_manager=self.field_manager)
            except ApiException as err:
                if err.status != 409:
                    raise
                # The index had not seen it, or it was created since: read it and judge again.
                live = _read(self.kube, manifest)
                state = ownership(live, self.owner_uid)
            else:
                self.report.wrote(manifest["kind"])
                self._own_as_applied(manifest, created)
                return True
        if state is not Ownership.OURS or live is None:
            return False
        repair = repair_needed(manifest, live, self.own_managers)
        uid = str(object_uid(live))
        if repair is Repair.REPLACE:
            log.info(
                "%s %s: fields added by %s are removed",
                manifest["kind"],
                manifest["metadata"]["name"],
                ", ".join(sorted(set(live["metadata"].get("specManagers") or []) - self.own_managers)),
            )
            replaced = self.kube.replace_spec(
                manifest, field_manager=self.field_manager, uid=uid, keep_replicas=True
            )
            self.report.wrote(manifest["kind"])
            self._own_as_applied(manifest, replaced)
            self.report.repaired.append(
                ObjectRef(manifest["kind"], manifest["metadata"]["namespace"], manifest["metadata"]["name"])
            )
        elif repair is Repair.APPLY:
            # Created by an operator version that left its create's fields apart: moved now,
            # so this apply can remove what the operator no longer sets.
            self._own_as_applied(manifest, _read(self.kube, manifest))
            self.kube.apply(manifest, field_manager=self.field_manager, uid=uid)
            self.report.wrote(manifest["kind"])
        return True

    def _own_as_applied(self, manifest: Manifest, written: dict[str, Any] | None) -> None:
        """Move the fields this manager wrote by create or replace into its applied ones (writes_as_applied),
        so that a later apply removes a field the operator stops setting."""
        meta = (written or {}).get("metadata") or {}
        entries = writes_as_applied(
            meta.get("managedFields"),
            self.field_manager,
            replicas_applied="replicas" in manifest.get("spec", {}),
        )
        if entries is None:
            return
        try:
            self.kube.set_managed_fields(
                manifest["apiVersion"],
                manifest["kind"],
                namespace=meta["namespace"],
                name=meta["name"],
                resource_version=str(meta["resourceVersion"]),
                entries=entries,
            )
        except ApiException as err:
            if err.status not in (409, 422):
                raise
            # Changed since it was read: the next reconcile's apply moves them (the APPLY path above).

    def remove(self, api_version: str, kind: str, namespace: str, name: str) -> None:
        stub = {"apiVersion": api_version, "kind": kind, "metadata": {"name": name, "namespace": namespace}}
        if self.live is None and not self.kube.has_kind(api_version, kind):
            return
        live = self.lookup(stub)
        if ownership(live, self.owner_uid) is Ownership.OURS and live is not None:
            self.kube.delete(api_version, kind, namespace=namespace, name=name, uid=str(object_uid(live)))
            self.report.wrote(kind)


def execute(
    kube: Kube,
    desired: DesiredState,
    *,
    namespace: str,
    owner_uid: str,
    field_manager: str,
    own_managers: frozenset[str] = frozenset(),
    live: LiveLookup | None = None,
) -> ExecutionReport:
    """Act on every object in order. A name taken by someone else, or a write the API server refuses for
    good (a 4xx other than 409/429), is reported and the other objects still converge; anything else that
    fails (a conflict, a timeout, a 5xx) is raised so the caller retries."""
    report = ExecutionReport()
    executor = _Executor(
        kube,
        owner_uid=owner_uid,
        field_manager=field_manager,
        own_managers=own_managers,
        live=live,
        report=report,
    )
    for manifest in desired.objects:
        ref = ObjectRef(manifest["kind"], namespace, manifest["metadata"]["name"])
        try:
            if not executor.converge(manifest):
                report.conflicts.append(ref)
        except ApiException as err:
            if err.status == 403 and "being terminated" in api_message(err):
                # The namespace is going: its LlamaServices go with it. Nothing to create or report.
                report.namespace_terminating = True
                return report
            if not is_permanent_refusal(err.status):
                raise
            report.rejections.append(Rejection(ref, int(err.status), api_message(err)))
    for api_version, kind, name in desired.absent:
        executor.remove(api_version, kind, namespace, name)
    return report


def set_deployment_replicas(
    kube: Kube,
    *,
    namespace: str,
    name: str,
    uid: str,
    replicas: int,
    field_manager: str,
    api_version: str = "apps/v1",
    kind: str = "Deployment",
) -> None:
    """Apply only spec.replicas of the Deployment with this uid (one this LlamaService controls), under the
    autoscaler's own field manager (the one writer of that field). A multi-node LlamaService's
    LeaderWorkerSet likewise: its spec.replicas counts groups, so the autoscaler scales whole groups."""
    kube.apply(
        {
            "apiVersion": api_version,
            "kind": kind,
            "metadata": {"name": name, "namespace": namespace},
            "spec": {"replicas": replicas},
        },
        field_manager=field_manager,
        uid=uid,
    )
