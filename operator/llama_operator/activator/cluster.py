"""The router's view of the cluster, from list+watch in threads: LlamaServices (served models, activation
timeouts, who may call them), the EndpointSlices of their Services, and Pods (which namespace a source
address belongs to, and which addresses are really the operator's vLLM pods). Its one write: a Lease per
service in its own namespace that reports demand; the operator copies it onto the LlamaService (the router
may write nothing in a tenant's namespace)."""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from kubernetes import client, watch
from kubernetes.client.exceptions import ApiException

from llama_operator.activator.routing import (
    ALLOWED_NAMESPACES_ANNOTATION,
    ServiceInfo,
    ServiceKey,
    parse_allowed,
)
from llama_operator.api.plan import status_plan
from llama_operator.api.resource import InvalidSpecError, parse_spec
from llama_operator.api.spec import GROUP, PLURAL, VERSION, AutoscalingSpec, LlamaServiceSpec
from llama_operator.api.times import micro_rfc3339
from llama_operator.desired.labels import (
    ACTIVATION_REQUESTED_ANNOTATION,
    DEMAND_LABEL,
    DEMAND_NAME_ANNOTATION,
    DEMAND_NAMESPACE_ANNOTATION,
    DEMAND_UID_ANNOTATION,
    LAST_ACTIVATION_ANNOTATION,
    MANAGED_BY,
    SERVICE_LABEL,
    SERVICE_NAME_LABEL,
)

log = logging.getLogger(__name__)

# The vLLM pods' endpoints, as the endpointslice controller publishes them (never the operator's slice that
# points back at the router, nor a hand-made one). That controller does not copy the Service's labels, so
# every Service's slices are watched (as kube-proxy does) and matched to LlamaServices by the Service name.
VLLM_SLICES = "endpointslice.kubernetes.io/managed-by=endpointslice-controller.k8s.io"


def demand_lease_name(key: ServiceKey) -> str:
    return f"demand.{key[0]}.{key[1]}"


DEFAULT_ACTIVATION_TIMEOUT = float(AutoscalingSpec.model_fields["activation_timeout_seconds"].default)


def service_info(obj: dict[str, Any]) -> ServiceInfo:
    """What the router needs of a LlamaService, from its typed spec and typed status.plan."""
    meta = obj.get("metadata") or {}
    plan = status_plan(obj.get("status"))
    try:
        spec: LlamaServiceSpec | None = parse_spec(obj.get("spec"))
    except InvalidSpecError:  # Degraded: the operator serves nothing for it, so there is nothing to route to
        spec = None
    autoscaling = spec.autoscaling if spec is not None else None
    served = (plan.served_model_name if plan is not None else "") or (
        spec.model.served_name if spec is not None else None
    )
    annotations = meta.get("annotations") or {}
    placed = (obj.get("status") or {}).get("adapters") or []
    adapter_pods = tuple(
        (str(entry["name"]), frozenset(str(pod) for pod in entry.get("replicas") or []))
        for entry in placed
        if isinstance(entry, dict) and entry.get("name")
    )
    return ServiceInfo(
        uid=str(meta.get("uid", "")),
        activation_timeout_seconds=float(autoscaling.activation_timeout_seconds)
        if autoscaling is not None
        else DEFAULT_ACTIVATION_TIMEOUT,
        models=(str(served),) if served else (),
        allowed_namespaces=parse_allowed(annotations.get(ALLOWED_NAMESPACES_ANNOTATION)),
        max_num_seqs=plan.max_num_seqs if plan is not None else 0,
        adapters=tuple(a.name for a in spec.adapters) if spec is not None and served else (),
        adapter_pods=adapter_pods,
    )


@dataclass(frozen=True, slots=True)
class PodFacts:
    namespace: str
    name: str
    ip: str
    service: str | None  # SERVICE_LABEL when the operator manages the pod (its vLLM pods), else None
    host_network: bool


def pod_facts(obj: dict[str, Any]) -> PodFacts | None:
    meta, spec, status = obj["metadata"], obj.get("spec") or {}, obj.get("status") or {}
    ip = status.get("podIP") or status.get("pod_ip")
    if not ip:
        return None
    labels = meta.get("labels") or {}
    owned = labels.get("app.kubernetes.io/managed-by") == MANAGED_BY and SERVICE_LABEL in labels
    return PodFacts(
        namespace=meta["namespace"],
        name=meta["name"],
        ip=str(ip),
        service=labels[SERVICE_LABEL] if owned else None,
        host_network=bool(spec.get("hostNetwork") or spec.get("host_network")),
    )


def slice_endpoints(slice_: dict[str, Any]) -> list[tuple[str, int, str]]:
    """(address, port, pod name) of each ready endpoint of one EndpointSlice, on its port named http (else
    its first). IP slices only (an FQDN slice names no pod), and only endpoints whose targetRef is a Pod."""
    family = slice_.get("addressType") or slice_.get("address_type")
    if family not in ("IPv4", "IPv6"):
        return []
    ports = [p for p in slice_.get("ports") or [] if p.get("port")]
    port = next((p for p in ports if p.get("name") == "http"), ports[0] if ports else None)
    if port is None:
        return []
    out = []
    for endpoint in slice_.get("endpoints") or []:
        if (endpoint.get("conditions") or {}).get("ready") is False:
            continue
        ref = endpoint.get("targetRef") or endpoint.get("target_ref") or {}
        if ref.get("kind") != "Pod" or not ref.get("name"):
            continue
        for address in endpoint.get("addresses") or []:
            out.append((str(address), int(port["port"]), str(ref["name"])))
    return out


def _nothing() -> None:
    return None


class ClusterView:
    """What the watches have shown, behind a lock; `changed` runs (in a watch thread) after each change."""

    def __init__(
        self,
        namespaces: list[str] | None,
        *,
        own_namespace: str = "default",
        identity: str = "router",
        trusted_namespaces: frozenset[str] = frozenset(),
    ) -> None:
        self.namespaces = namespaces  # None: all
        self.own_namespace = own_namespace
        self.identity = identity
        self.trusted_namespaces = trusted_namespaces
        self.changed: Callable[[], None] = _nothing
        self.lock = threading.Lock()
        self.services: dict[ServiceKey, ServiceInfo] = {}
        # (ns, slice) -> (service, [(address, port, pod)])
        self.slices: dict[tuple[str, str], tuple[ServiceKey, list[tuple[str, int, str]]]] = {}
        # The same slices by the Service they belong to: every Service's slices are watched, and a request
        # must not walk them all (thousands in a large cluster) to find its service's few.
        self.slices_of: dict[ServiceKey, set[tuple[str, str]]] = {}
        self.pods: dict[tuple[str, str], PodFacts] = {}  # (ns, name)
        self.pods_by_ip: dict[str, set[tuple[str, str]]] = {}
        self.synced: set[str] = set()
        self.api = client.ApiClient()

    # --- reads ---------------------------------------------------------------------------------------
    def endpoints(self, key: ServiceKey) -> list[str]:
        """host:port of the service's ready vLLM pods: an address counts only when a Pod of that name in the
        service's namespace has it, is labelled as the operator's pod of this service, and is not on the
        host network."""
        return sorted(self.endpoint_pods(key))

    def endpoint_pods(self, key: ServiceKey) -> dict[str, str]:
        """The same endpoints, each with its pod's name (status.adapters names pods)."""
        with self.lock:
            out: dict[str, str] = {}
            for slice_key in self.slices_of.get(key, ()):
                for address, port, pod_name in self.slices[slice_key][1]:
                    pod = self.pods.get((key[0], pod_name))
                    if pod is None or pod.ip != address or pod.service != key[1] or pod.host_network:
                        continue
                    out[f"[{address}]:{port}" if ":" in address else f"{address}:{port}"] = pod_name
            return out

    def service(self, key: ServiceKey) -> ServiceInfo | None:
        with self.lock:
            return self.services.get(key)

    def known(self) -> dict[ServiceKey, ServiceInfo]:
        with self.lock:
            return dict(self.services)

    def namespace_of(self, address: str) -> str | None:
        """The namespace of the one pod (not on the host network) with this address; None if none or if
        several pods of different namespaces claim it (an address being reused)."""
        with self.lock:
            owners = {
                self.pods[k].namespace
                for k in self.pods_by_ip.get(address, ())
                if k in self.pods and not self.pods[k].host_network
            }
        return owners.pop() if len(owners) == 1 else None

    @property
    def ready(self) -> bool:
        return self.synced >= {"llamaservices", "endpointslices", "pods"}

    # --- the one write: a demand Lease in the router's own namespace ------------------------------------
    def report(self, key: ServiceKey, uid: str, annotations: dict[str, str]) -> None:
        """Create or update the service's demand Lease (renewTime now); the operator copies its annotations
        onto the LlamaService whose uid it names."""
        coordination = client.CoordinationV1Api(self.api)
        name = demand_lease_name(key)
        now = datetime.now(UTC)
        body = {
            "metadata": {
                "name": name,
                "labels": {DEMAND_LABEL: "true"},
                "annotations": {
                    DEMAND_NAMESPACE_ANNOTATION: key[0],
                    DEMAND_NAME_ANNOTATION: key[1],
                    DEMAND_UID_ANNOTATION: uid,
                    **annotations,
                },
            },
            "spec": {"holderIdentity": self.identity, "renewTime": micro_rfc3339(now)},
        }
        try:
            coordination.patch_namespaced_lease(name, self.own_namespace, body)
        except ApiException as err:
            if err.status != 404:
                log.warning("demand Lease %s/%s: %s %s", self.own_namespace, name, err.status, err.reason)
                return
            try:
                coordination.create_namespaced_lease(self.own_namespace, body)
            except ApiException as err2:
                if err2.status == 409:  # the other replica created it meanwhile
                    self.report(key, uid, annotations)
                    return
                log.warning("demand Lease %s/%s: %s %s", self.own_namespace, name, err2.status, err2.reason)

    def request_activation(self, key: ServiceKey, uid: str, at: float) -> None:
        self.report(key, uid, {ACTIVATION_REQUESTED_ANNOTATION: micro_rfc3339(at)})

    def record_activation(self, key: ServiceKey, uid: str, seconds: float, at: float) -> None:
        value = json.dumps({"seconds": round(seconds, 3), "time": micro_rfc3339(at)}, separators=(",", ":"))
        self.report(key, uid, {LAST_ACTIVATION_ANNOTATION: value})

    # --- watches ----------------------------------------------------------------------------------------
    def start(self) -> None:
        targets: list[str | None] = list(self.namespaces) if self.namespaces else [None]
        pod_targets: list[str | None] = [None]
        if self.namespaces:  # callers come from the served namespaces, and trusted ones
            pod_targets = [*sorted(set(self.namespaces) | self.trusted_namespaces)]
        for target, namespaces in (
            (self._watch_llamaservices, targets),
            (self._watch_slices, targets),
            (self._watch_pods, pod_targets),
        ):
            for namespace in namespaces:
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
                self.services[key] = service_info(obj)

        def reset(items: list[dict[str, Any]]) -> None:
            for key in [k for k in self.services if namespace is None or k[0] == namespace]:
                del self.services[key]
            for obj in items:
                apply("ADDED", obj)

        self._loop("llamaservices", namespace, lister, apply, reset, raw=True)

    def _watch_slices(self, namespace: str | None) -> None:
        discovery = client.DiscoveryV1Api(self.api)

        def lister(**kw: Any) -> Any:
            if namespace is None:
                return discovery.list_endpoint_slice_for_all_namespaces(label_selector=VLLM_SLICES, **kw)
            return discovery.list_namespaced_endpoint_slice(namespace, label_selector=VLLM_SLICES, **kw)

        def apply(kind: str, obj: dict[str, Any]) -> None:
            meta = obj["metadata"]
            slice_key = (meta["namespace"], meta["name"])
            forget(slice_key)
            if kind == "DELETED":
                return
            owner = (meta["namespace"], (meta.get("labels") or {}).get(SERVICE_NAME_LABEL, ""))
            self.slices[slice_key] = (owner, slice_endpoints(obj))
            self.slices_of.setdefault(owner, set()).add(slice_key)

        def forget(slice_key: tuple[str, str]) -> None:
            old = self.slices.pop(slice_key, None)
            if old is not None:
                keys = self.slices_of.get(old[0], set())
                keys.discard(slice_key)
                if not keys:
                    self.slices_of.pop(old[0], None)

        def reset(items: list[dict[str, Any]]) -> None:
            for key in [k for k in self.slices if namespace is None or k[0] == namespace]:
                forget(key)
            for obj in items:
                apply("ADDED", obj)

        self._loop("endpointslices", namespace, lister, apply, reset, raw=False)

    def _watch_pods(self, namespace: str | None) -> None:
        core = client.CoreV1Api(self.api)

        def lister(**kw: Any) -> Any:
            if namespace is None:
                return core.list_pod_for_all_namespaces(**kw)
            return core.list_namespaced_pod(namespace, **kw)

        def forget(key: tuple[str, str]) -> None:
            old = self.pods.pop(key, None)
            if old is not None:
                owners = self.pods_by_ip.get(old.ip, set())
                owners.discard(key)
                if not owners:
                    self.pods_by_ip.pop(old.ip, None)

        def apply(kind: str, obj: dict[str, Any]) -> None:
            key = (obj["metadata"]["namespace"], obj["metadata"]["name"])
            forget(key)
            facts = None if kind == "DELETED" else pod_facts(obj)
            if facts is not None:
                self.pods[key] = facts
                self.pods_by_ip.setdefault(facts.ip, set()).add(key)

        def reset(items: list[dict[str, Any]]) -> None:
            for key in [k for k in self.pods if namespace is None or k[0] == namespace]:
                forget(key)
            for obj in items:
                apply("ADDED", obj)

        self._loop("pods", namespace, lister, apply, reset, raw=False)

    def _loop(
        self,
        what: str,
        namespace: str | None,
        lister: Callable[..., Any],
        apply: Callable[[str, dict[str, Any]], None],
        reset: Callable[[list[dict[str, Any]]], None],
        *,
        raw: bool,
    ) -> None:
        """List, then watch from the list's resourceVersion; a broken watch resumes, an expired one
        (410) lists again. Forever, in its own thread. `what` counts as synced once every namespace of it
        listed."""
        serialize = self.api.sanitize_for_serialization
        expected = len(self.namespaces or [None]) if what != "pods" else None
        while True:
            try:
                listed = lister()
                body = listed if raw else serialize(listed)
                items = list(body.get("items") or [])
                version = body["metadata"]["resourceVersion"]
                with self.lock:
                    reset(items)
                self._listed(what, namespace, expected)
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

    def _listed(self, what: str, namespace: str | None, expected: int | None) -> None:
        with self.lock:
            self.synced.add(f"{what}/{namespace}")
            count = sum(1 for s in self.synced if s.startswith(f"{what}/"))
            wanted = (
                expected
                if expected is not None
                else len(
                    sorted(set(self.namespaces) | self.trusted_namespaces) if self.namespaces else [None]
                )
            )
            if count >= wanted:
                self.synced.add(what)
