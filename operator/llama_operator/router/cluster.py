"""The router's view of the cluster, from list+watch in threads: LlamaServices (served models, activation
timeouts, who may call them), the EndpointSlices of their Services, and Pods (which namespace a source
address belongs to, and which addresses are really the operator's vLLM pods). Its one write: a Lease per
service in its own namespace that reports demand; the operator copies it onto the LlamaService (the router
may write nothing in a tenant's namespace)."""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException

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
from llama_operator.router.routing import (
    ALLOWED_NAMESPACES_ANNOTATION,
    ServiceInfo,
    ServiceKey,
    parse_allowed,
)
from llama_operator.router.watches import (
    CONNECT_TIMEOUT_SECONDS,
    Handlers,
    Lister,
    SyncState,
    error_line,
    run_watch,
)

log = logging.getLogger(__name__)

# The vLLM pods' endpoints, as the endpointslice controller publishes them (never the operator's slice that
# points back at the router, nor a hand-made one). That controller does not copy the Service's labels, so
# every Service's slices are watched (as kube-proxy does) and matched to LlamaServices by the Service name.
VLLM_SLICES = "endpointslice.kubernetes.io/managed-by=endpointslice-controller.k8s.io"


LEASE_TIMEOUT_SECONDS = 10.0  # a demand report that takes longer is dropped; a held request reports again


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


def quiet_api_client() -> client.ApiClient:
    """The kubeconfig's client without urllib3's own retries: the watches back off themselves, and each
    retry of urllib3's wrote a warning (three a second per watch while the API server was away)."""
    configuration = client.Configuration.get_default_copy()
    configuration.retries = False
    return client.ApiClient(configuration)


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
        api: client.ApiClient | None = None,
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
        self.sync = SyncState()
        self.report_failure: str | None = None  # why the last demand report failed; None once one works
        self.stopped = threading.Event()
        self.api = api or quiet_api_client()

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

    def service_of_endpoint(self, endpoint: str) -> ServiceKey | None:
        """The LlamaService whose ready vLLM pod `endpoint` (host:port) is, else None."""
        host = endpoint.rsplit(":", 1)[0].strip("[]")
        with self.lock:
            keys = [
                (pod.namespace, pod.service)
                for k in self.pods_by_ip.get(host, ())
                if (pod := self.pods.get(k)) is not None and pod.service is not None and not pod.host_network
            ]
        if len(keys) != 1:
            return None
        key = keys[0]
        return key if endpoint in self.endpoint_pods(key) else None

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
        """Every watch listed, and none is out of sync now (the API server away, a re-list failing)."""
        return self.sync.ready

    def problems(self) -> list[str]:
        return self.sync.problems()

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
            self._write_lease(coordination, name, body)
        except Exception as err:  # the API server away: the next report (seconds later) tries again
            self._report_failed(f"demand Lease {self.own_namespace}/{name}: {error_line(err)}")
            return
        self._report_failed(None)

    def _write_lease(self, coordination: Any, name: str, body: dict[str, Any]) -> None:
        timeout = (CONNECT_TIMEOUT_SECONDS, LEASE_TIMEOUT_SECONDS)
        try:
            coordination.patch_namespaced_lease(name, self.own_namespace, body, _request_timeout=timeout)
        except ApiException as err:
            if err.status != 404:
                raise
            try:
                coordination.create_namespaced_lease(self.own_namespace, body, _request_timeout=timeout)
            except ApiException as err2:
                if err2.status != 409:
                    raise
                # the other replica created it meanwhile
                coordination.patch_namespaced_lease(name, self.own_namespace, body, _request_timeout=timeout)

    def _report_failed(self, why: str | None) -> None:
        """One line in the log when demand reports start failing (and why), one when they work again."""
        with self.lock:
            was, self.report_failure = self.report_failure, why
        if why is not None and was is None:
            log.warning("%s; the next reports retry (logged again once they succeed)", why)
        elif why is None and was is not None:
            log.info("demand reports written again")

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
        for what, handlers, namespaces in (
            ("llamaservices", self._llamaservices, targets),
            ("endpointslices", self._slices, targets),
            ("pods", self._pods, pod_targets),
        ):
            for namespace in namespaces:
                name = f"{what}/{namespace or '*'}"
                self.sync.expect(name)
                lister, handling = handlers(namespace)
                threading.Thread(
                    target=run_watch,
                    args=(name, lister, handling),
                    kwargs={
                        "state": self.sync,
                        "lock": self.lock,
                        "changed": self._changed,
                        "stopped": self.stopped,
                    },
                    name=f"watch-{name}",
                    daemon=True,
                ).start()

    def stop(self) -> None:
        self.stopped.set()

    def _changed(self) -> None:
        self.changed()  # looked up at each change: whoever set `changed` after start() is called

    def _llamaservices(self, namespace: str | None) -> tuple[Lister, Handlers]:
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

        def clear() -> None:
            for key in [k for k in self.services if namespace is None or k[0] == namespace]:
                del self.services[key]

        return lister, Handlers(clear, apply)

    def _slices(self, namespace: str | None) -> tuple[Lister, Handlers]:
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

        def clear() -> None:
            for key in [k for k in self.slices if namespace is None or k[0] == namespace]:
                forget(key)

        return lister, Handlers(clear, apply)

    def _pods(self, namespace: str | None) -> tuple[Lister, Handlers]:
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

        def clear() -> None:
            for key in [k for k in self.pods if namespace is None or k[0] == namespace]:
                forget(key)

        return lister, Handlers(clear, apply)
