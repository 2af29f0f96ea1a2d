"""The Kubernetes API edge: server-side apply with one field manager, deletes, status patches, Events."""

from __future__ import annotations

import builtins
import logging
import os
import threading
from collections.abc import Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from kubernetes import client, config
from kubernetes.client.exceptions import ApiException
from kubernetes.dynamic import DynamicClient
from kubernetes.dynamic.exceptions import NotFoundError, ResourceNotFoundError

from llama_operator.api.spec import GROUP, PLURAL, VERSION

log = logging.getLogger(__name__)

Manifest = Mapping[str, Any]


SERVICE_ACCOUNT_NAMESPACE_FILE = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")


class NoClusterError(RuntimeError):
    """Neither in-cluster credentials nor a usable kubeconfig: nothing to connect to."""


def load_kube_config() -> None:
    """In-cluster credentials when running in a pod, else the kubeconfig (KUBECONFIG or ~/.kube/config)."""
    try:
        config.load_incluster_config()
    except config.ConfigException:
        try:
            config.load_kube_config()
        except (config.ConfigException, OSError) as err:
            raise NoClusterError(
                f"no Kubernetes cluster to connect to: not in a pod, and no usable kubeconfig ({err}); set "
                "KUBECONFIG to a kubeconfig file"
            ) from None


def kubeconfig_namespace() -> str | None:
    """The namespace of the kubeconfig's current context, when it names one (as kubectl defaults to)."""
    try:
        # KUBECONFIG read now: the client's own default was fixed when it was imported.
        _, active = config.list_kube_config_contexts(config_file=os.environ.get("KUBECONFIG") or None)
    except (config.ConfigException, OSError):
        return None
    namespace = (active or {}).get("context", {}).get("namespace")
    return str(namespace) if namespace else None


def own_namespace(
    env: Mapping[str, str], *, service_account_file: Path = SERVICE_ACCOUNT_NAMESPACE_FILE
) -> tuple[str, str]:
    """The operator's own namespace and where it came from: POD_NAMESPACE (the chart sets it from the
    downward API), the mounted ServiceAccount's namespace, the kubeconfig context's namespace, or
    `default` as kubectl has it. Out of a cluster the kubeconfig is the only place that can say."""
    if env.get("POD_NAMESPACE"):
        return env["POD_NAMESPACE"], "POD_NAMESPACE"
    try:
        from_file = service_account_file.read_text().strip()
    except OSError:
        from_file = ""
    if from_file:
        return from_file, "the ServiceAccount's namespace"
    from_context = kubeconfig_namespace()
    if from_context:
        return from_context, "the kubeconfig context's namespace"
    return "default", "no namespace given anywhere (kubeconfig context, POD_NAMESPACE): default"


class Kube:
    """Thin wrapper over the dynamic client; every write is idempotent."""

    def __init__(self, api_client: client.ApiClient | None = None) -> None:
        self.api_client = api_client or client.ApiClient()
        self._dynamic: DynamicClient | None = None
        self._resources: dict[tuple[str, str], Any] = {}
        # The reconcile workers share this object from several threads, and the client's discovery is
        # not thread-safe: a refresh replaces its cache while another thread reads it (KeyError:
        # 'resources'). Discovery and the lookups that may refresh it run under this lock.
        self._discovery_lock = threading.Lock()

    @property
    def dynamic(self) -> DynamicClient:
        with self._discovery_lock:
            return self._discovered()

    def _discovered(self) -> DynamicClient:
        if self._dynamic is None:  # discovery is a round of API reads: do it once, lazily
            dynamic = DynamicClient(self.api_client)
            # The client keeps discovery in a file shared by every process on the host: one written
            # before a CRD was removed (or added) would be believed. Start from the API server's word.
            dynamic.resources.invalidate_cache()
            self._dynamic = dynamic  # published only once complete
        return self._dynamic

    def _resource(self, api_version: str, kind: str) -> Any:
        key = (api_version, kind)
        with self._discovery_lock:
            if key not in self._resources:
                self._resources[key] = self._discovered().resources.get(api_version=api_version, kind=kind)
            return self._resources[key]

    def apply(self, manifest: Manifest, *, field_manager: str, uid: str) -> dict[str, Any]:
        """Server-side apply to the existing object with this uid; conflicts are forced (this manager owns
        what it applies). The uid in the body is a precondition: if the object was deleted and re-created
        by someone else meanwhile, the API server refuses the write (a uid is immutable)."""
        resource = self._resource(manifest["apiVersion"], manifest["kind"])
        meta = dict(manifest["metadata"])
        meta["uid"] = uid
        result = self.dynamic.server_side_apply(
            resource,
            body={**manifest, "metadata": meta},
            name=meta["name"],
            namespace=meta.get("namespace"),
            field_manager=field_manager,
            force_conflicts=True,
        )
        return dict(result.to_dict())

    def create(self, manifest: Manifest, *, field_manager: str) -> dict[str, Any]:
        """Create (POST): fails with 409 if anything already has the name, so nothing is ever adopted."""
        resource = self._resource(manifest["apiVersion"], manifest["kind"])
        result = self.dynamic.create(
            resource,
            body=dict(manifest),
            namespace=manifest["metadata"].get("namespace"),
            field_manager=field_manager,
        )
        return dict(result.to_dict())

    def set_managed_fields(
        self,
        api_version: str,
        kind: str,
        *,
        namespace: str,
        name: str,
        resource_version: str,
        entries: list[Any],
    ) -> None:
        """Write an object's managedFields as given (a JSON patch, conditional on its resourceVersion: an
        object changed since it was read is left for the next reconcile)."""
        self.dynamic.patch(
            self._resource(api_version, kind),
            body=[
                {"op": "test", "path": "/metadata/resourceVersion", "value": resource_version},
                {"op": "replace", "path": "/metadata/managedFields", "value": entries},
            ],
            name=name,
            namespace=namespace,
            content_type="application/json-patch+json",
        )

    def replace_spec(
        self, manifest: Manifest, *, field_manager: str, uid: str, keep_replicas: bool
    ) -> dict[str, Any]:
        """Replace (PUT) the spec of the object with this uid by the desired one: unlike an apply, this also
        removes fields that someone else added. Conditional on the resourceVersion just read."""
        api_version, kind, meta = manifest["apiVersion"], manifest["kind"], manifest["metadata"]
        resource = self._resource(api_version, kind)
        live = dict(self.dynamic.get(resource, name=meta["name"], namespace=meta["namespace"]).to_dict())
        live_meta = live["metadata"]
        if live_meta.get("uid") != uid:
            raise ApiException(status=409, reason=f"{kind} {meta['name']} was replaced by another object")
        spec = dict(manifest["spec"])
        if keep_replicas and "replicas" in (live.get("spec") or {}):
            spec.setdefault("replicas", live["spec"]["replicas"])
        body = {
            "apiVersion": api_version,
            "kind": kind,
            "metadata": {
                **{k: v for k, v in live_meta.items() if k != "managedFields"},
                "labels": {**(live_meta.get("labels") or {}), **meta.get("labels", {})},
                "ownerReferences": meta["ownerReferences"],
            },
            "spec": spec,
        }
        result = self.dynamic.replace(
            resource, body=body, name=meta["name"], namespace=meta["namespace"], field_manager=field_manager
        )
        return dict(result.to_dict())

    def post_event(
        self, involved: Mapping[str, Any], *, reason: str, message: str, warning: bool, component: str
    ) -> None:
        """A core/v1 Event about an object (what `kubectl describe` shows). Best effort: never fails a
        reconcile."""
        meta = involved["metadata"]
        now = datetime.now(UTC)
        event = client.CoreV1Event(
            metadata=client.V1ObjectMeta(generate_name=f"{meta['name']}.", namespace=meta["namespace"]),
            involved_object=client.V1ObjectReference(
                api_version=involved.get("apiVersion"),
                kind=involved.get("kind"),
                name=meta["name"],
                namespace=meta["namespace"],
                uid=meta.get("uid"),
                resource_version=meta.get("resourceVersion"),
            ),
            reason=reason,
            message=message[:1024],
            type="Warning" if warning else "Normal",
            first_timestamp=now,
            last_timestamp=now,
            count=1,
            source=client.V1EventSource(component=component),
            reporting_component=component,
            reporting_instance=component,
        )
        try:
            client.CoreV1Api(self.api_client).create_namespaced_event(meta["namespace"], event)
        except ApiException as err:
            log.warning("could not post Event %s on %s: %s %s", reason, meta["name"], err.status, err.reason)

    def delete(self, api_version: str, kind: str, *, namespace: str, name: str, uid: str) -> bool:
        """Delete the object with this uid, and only that one (a uid precondition); True when deleted."""
        body = {"apiVersion": "v1", "kind": "DeleteOptions", "preconditions": {"uid": uid}}
        try:
            self.dynamic.delete(self._resource(api_version, kind), name=name, namespace=namespace, body=body)
        except (NotFoundError, ResourceNotFoundError):
            return False
        return True

    def get(self, api_version: str, kind: str, *, namespace: str, name: str) -> dict[str, Any] | None:
        try:
            obj = self.dynamic.get(self._resource(api_version, kind), name=name, namespace=namespace)
        except NotFoundError:
            return None
        return dict(obj.to_dict())

    def list(
        self, api_version: str, kind: str, *, namespace: str | None = None, label_selector: str | None = None
    ) -> list[dict[str, Any]]:
        result = self.dynamic.get(
            self._resource(api_version, kind), namespace=namespace, label_selector=label_selector
        )
        return [dict(item.to_dict()) for item in result.items]

    def pods_on_node(self, node: str) -> builtins.list[dict[str, Any]]:
        """Every pod bound to a node, in all namespaces (a field selector: one list, no watch)."""
        result = self.dynamic.get(self._resource("v1", "Pod"), field_selector=f"spec.nodeName={node}")
        return [dict(item.to_dict()) for item in result.items]

    def annotate_pod(self, *, namespace: str, name: str, annotations: Mapping[str, str]) -> None:
        """Merge annotations into a pod's metadata; a pod gone meanwhile is no error."""
        try:
            self.dynamic.patch(
                self._resource("v1", "Pod"),
                name=name,
                namespace=namespace,
                body={"metadata": {"annotations": dict(annotations)}},
                content_type="application/merge-patch+json",
            )
        except NotFoundError:
            return

    def has_kind(self, api_version: str, kind: str) -> bool:
        try:
            self._resource(api_version, kind)
        except ResourceNotFoundError:
            return False
        return True

    def set_pod_condition(self, *, namespace: str, name: str, condition: Mapping[str, Any]) -> None:
        """One condition of a pod's status (a readiness gate's), by a strategic merge on the conditions' type;
        a pod gone meanwhile is no error."""
        # The generated client would send a JSON patch (its first content type); a strategic merge patch
        # merges conditions by type, so the kubelet's own are kept.
        try:
            self.api_client.call_api(
                f"/api/v1/namespaces/{namespace}/pods/{name}/status",
                "PATCH",
                header_params={
                    "Content-Type": "application/strategic-merge-patch+json",
                    "Accept": "application/json",
                },
                body={"status": {"conditions": [dict(condition)]}},
                auth_settings=["BearerToken"],
                response_type="object",
                _return_http_data_only=True,
            )
        except ApiException as err:
            if err.status != 404:
                raise

    def patch_llamaservice_status(
        self, *, namespace: str, name: str, status: Mapping[str, Any]
    ) -> dict[str, Any] | None:
        """Merge-patch the status subresource (never the spec); the object as written, None if gone."""
        api = client.CustomObjectsApi(self.api_client)
        try:
            written = api.patch_namespaced_custom_object_status(
                GROUP, VERSION, namespace, PLURAL, name, {"status": dict(status)}
            )
        except ApiException as err:
            if err.status != 404:  # deleted meanwhile: nothing to report on
                raise
            return None
        return dict(written) if isinstance(written, Mapping) else None
