"""The activator's view of the cluster: LlamaServices (their activation timeouts) and the ready endpoints of
their vLLM pods, from list+watch in threads; and its one write, the demand annotation on a LlamaService."""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from kubernetes import client, watch
from kubernetes.client.exceptions import ApiException

from llama_operator.activator.routing import HeldService, ServiceKey
from llama_operator.api.spec import GROUP, PLURAL, VERSION
from llama_operator.desired.labels import (
    ACTIVATION_REQUESTED_ANNOTATION,
    LAST_ACTIVATION_ANNOTATION,
    SERVICE_NAME_LABEL,
)

log = logging.getLogger(__name__)

# The vLLM pods' endpoints, as the endpointslice controller publishes them (never the operator's slice that
# points back at the activator). That controller does not copy the Service's labels, so every Service's
# slices are watched (as kube-proxy does) and matched to LlamaServices by the Service name.
VLLM_SLICES = "endpointslice.kubernetes.io/managed-by=endpointslice-controller.k8s.io"


def rfc3339(seconds: float) -> str:
    return datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def held_service(obj: dict[str, Any]) -> HeldService:
    autoscaling = (obj.get("spec") or {}).get("autoscaling") or {}
    timeout = autoscaling.get("activationTimeoutSeconds", 300)
    return HeldService(
        uid=str(obj["metadata"].get("uid", "")),
        activation_timeout_seconds=float(timeout) if isinstance(timeout, int | float) else 300.0,
    )


def ready_endpoints(slice_: dict[str, Any]) -> list[str]:
    """host:port of each ready endpoint of one EndpointSlice, on its port named http (else its first)."""
    ports = [p for p in slice_.get("ports") or [] if p.get("port")]
    port = next((p for p in ports if p.get("name") == "http"), ports[0] if ports else None)
    if port is None:
        return []
    family = slice_.get("addressType") or slice_.get("address_type") or "IPv4"
    out = []
    for endpoint in slice_.get("endpoints") or []:
        if (endpoint.get("conditions") or {}).get("ready") is False:
            continue
        for address in endpoint.get("addresses") or []:
            out.append(f"[{address}]:{port['port']}" if family == "IPv6" else f"{address}:{port['port']}")
    return out


def _nothing() -> None:
    return None


class ClusterView:
    """What the watches have shown, behind a lock; `changed` runs (in a watch thread) after each change."""

    def __init__(self, namespaces: list[str] | None) -> None:
        self.namespaces = namespaces  # None: all
        self.changed: Callable[[], None] = _nothing
        self.lock = threading.Lock()
        self.services: dict[ServiceKey, HeldService] = {}
        self.slices: dict[tuple[str, str], tuple[ServiceKey, list[str]]] = {}  # (ns, slice) -> (service, eps)
        self.synced: set[str] = set()
        self.api = client.ApiClient()

    # --- reads ---------------------------------------------------------------------------------------
    def endpoints(self, key: ServiceKey) -> list[str]:
        with self.lock:
            return sorted({ep for owner, eps in self.slices.values() if owner == key for ep in eps})

    def service(self, key: ServiceKey) -> HeldService | None:
        with self.lock:
            return self.services.get(key)

    def known(self) -> dict[ServiceKey, HeldService]:
        with self.lock:
            return dict(self.services)

    @property
    def ready(self) -> bool:
        return self.synced >= {"llamaservices", "endpointslices"}

    # --- the one write ----------------------------------------------------------------------------------
    def annotate(self, key: ServiceKey, uid: str, annotations: dict[str, str]) -> None:
        """A merge patch of the LlamaService's metadata.annotations, with its uid as precondition (a
        LlamaService deleted and re-created meanwhile is not the one that had the demand)."""
        custom = client.CustomObjectsApi(self.api)
        body = {"metadata": {"uid": uid, "annotations": annotations}}
        try:
            custom.patch_namespaced_custom_object(GROUP, VERSION, key[0], PLURAL, key[1], body)
        except ApiException as err:
            log.warning("annotating %s/%s: %s %s", *key, err.status, err.reason)

    def request_activation(self, key: ServiceKey, uid: str, at: float) -> None:
        self.annotate(key, uid, {ACTIVATION_REQUESTED_ANNOTATION: rfc3339(at)})

    def record_activation(self, key: ServiceKey, uid: str, seconds: float, at: float) -> None:
        value = json.dumps({"seconds": round(seconds, 3), "time": rfc3339(at)}, separators=(",", ":"))
        self.annotate(key, uid, {LAST_ACTIVATION_ANNOTATION: value})

    # --- watches ----------------------------------------------------------------------------------------
    def start(self) -> None:
        for target in (self._watch_llamaservices, self._watch_slices):
            targets: list[str | None] = list(self.namespaces) if self.namespaces else [None]
            for namespace in targets:
                threading.Thread(target=target, args=(namespace,), daemon=True).start()

    def _watch_llamaservices(self, namespace: str | None) -> None:
        custom = client.CustomObjectsApi(self.api)

        def lister(**kw: Any) -> Any:
            if namespace is None:
                return custom.list_cluster_custom_object(GROUP, VERSION, PLURAL, **kw)
            return custom.list_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, **kw)

        def apply(kind: str, obj: dict[str, Any]) -> None:
            key = (obj["metadata"]["namespace"], obj["metadata"]["name"])
            if kind == "DELETED":
                self.services.pop(key, None)
            else:
                self.services[key] = held_service(obj)

        def reset(items: list[dict[str, Any]]) -> None:
            mine = {k for k in self.services if namespace is None or k[0] == namespace}
            for key in mine:
                del self.services[key]
            for obj in items:
                apply("ADDED", obj)

        self._loop("llamaservices", lister, apply, reset, raw=True)

    def _watch_slices(self, namespace: str | None) -> None:
        discovery = client.DiscoveryV1Api(self.api)

        def lister(**kw: Any) -> Any:
            if namespace is None:
                return discovery.list_endpoint_slice_for_all_namespaces(label_selector=VLLM_SLICES, **kw)
            return discovery.list_namespaced_endpoint_slice(namespace, label_selector=VLLM_SLICES, **kw)

        def apply(kind: str, obj: dict[str, Any]) -> None:
            meta = obj["metadata"]
            slice_key = (meta["namespace"], meta["name"])
            if kind == "DELETED":
                self.slices.pop(slice_key, None)
                return
            owner = (meta["namespace"], (meta.get("labels") or {}).get(SERVICE_NAME_LABEL, ""))
            self.slices[slice_key] = (owner, ready_endpoints(obj))

        def reset(items: list[dict[str, Any]]) -> None:
            for key in [k for k in self.slices if namespace is None or k[0] == namespace]:
                del self.slices[key]
            for obj in items:
                apply("ADDED", obj)

        self._loop("endpointslices", lister, apply, reset, raw=False)

    def _loop(
        self,
        what: str,
        lister: Callable[..., Any],
        apply: Callable[[str, dict[str, Any]], None],
        reset: Callable[[list[dict[str, Any]]], None],
        *,
        raw: bool,
    ) -> None:
        """List, then watch from the list's resourceVersion; a broken watch resumes, an expired one
        (410) lists again. Forever, in its own thread."""
        serialize = self.api.sanitize_for_serialization
        while True:
            try:
                listed = lister()
                body = listed if raw else serialize(listed)
                items = list(body.get("items") or [])
                version = body["metadata"]["resourceVersion"]
                with self.lock:
                    reset(items)
                self.synced.add(what)
                self.changed()
                while True:
                    stream = watch.Watch().stream(
                        lister, resource_version=version, timeout_seconds=300, allow_watch_bookmarks=True
                    )
                    for event in stream:
                        if event["type"] == "ERROR":  # an expired resourceVersion: list again
                            raise ApiException(status=410, reason="watch expired")
                        obj = event["object"] if raw else serialize(event["object"])
                        version = obj["metadata"]["resourceVersion"]
                        if event["type"] == "BOOKMARK":
                            continue
                        with self.lock:
                            apply(event["type"], obj)
                        self.changed()
            except ApiException as err:
                if err.status != 410:
                    log.warning("watching %s: %s %s; again in 2s", what, err.status, err.reason)
                    time.sleep(2.0)
            except Exception:
                log.exception("watching %s failed; again in 2s", what)
                time.sleep(2.0)
