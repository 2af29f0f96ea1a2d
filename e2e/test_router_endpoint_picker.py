"""The router as the endpoint picker of the operator's InferencePools, end to end on the local cluster
(issue 45): the operator writes each pool naming the picker (config.inferencePoolEndpointPicker, its port),
the router serves the endpoint-picker protocol (`--ext-proc-port`), and a client of the same wire protocol
plays the gateway, as a gateway does it: it reads the pool, takes the pool's Ready pods as the endpoint
subset, and asks the picker over gRPC (Envoy ext_proc, FULL_DUPLEX_STREAMED) for each request.

No gateway binary can be had here (Debian packages no Envoy; agentgateway is a very long build), so the
client is `llama_operator.router.ext_proc_wire.ask_picker`, the same messages a gateway sends.

- the pool names the router's picker Service and port;
- every turn of a conversation lands on the pod that took its first turn (prefix affinity), and the
  conversations spread over the pool's pods;
- a request for team-a's pool gets a team-a pod whatever its headers name (team-b's service, Host,
  namespace, the destination header itself).
"""

from __future__ import annotations

import asyncio
import json
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest

from llama_operator.router import ext_proc_wire as wire
from router_support import RouterProcess, namespaces, router_to_a_recorder
from support import Cluster, OperatorProcess, eventually, free_port, llamaservice_manifest

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(400)]

CRD_FILE = Path(__file__).parent / "crds" / "inference.networking.k8s.io_inferencepools.yaml"
CRD_NAME = "inferencepools.inference.networking.k8s.io"
PICKER_SERVICE = "llama-router-epp"
ACCELERATOR = {"type": "a100-80gb", "mig": "1g.10gb"}


@pytest.fixture(scope="module")
def spaces(cluster: Cluster) -> Iterator[dict[str, str]]:
    with namespaces(cluster, a="epp-a", b="epp-b", router="epp-router") as names:
        yield names


@pytest.fixture(scope="module")
def picker_port() -> int:
    return free_port()


@pytest.fixture(scope="module")
def pool_crd(cluster: Cluster) -> Iterator[None]:
    existed = cluster.get("crd", CRD_NAME, "default") is not None
    if not existed:
        cluster.kubectl("apply", "--server-side", "-f", str(CRD_FILE))
        cluster.wait_crd_established(CRD_NAME)
    yield
    if not existed:
        cluster.kubectl("delete", "crd", CRD_NAME, "--timeout=60s", check=False)


@pytest.fixture(scope="module")
def picker_operator(
    cluster: Cluster, pool_crd: None, picker_port: int, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[OperatorProcess]:
    proc = OperatorProcess(
        cluster,
        log_dir=tmp_path_factory.mktemp("operator"),
        extra_env={
            "LLAMA_OPERATOR_INFERENCE_POOL": "auto",
            "LLAMA_OPERATOR_INFERENCE_POOL_ENDPOINT_PICKER": PICKER_SERVICE,
            "LLAMA_OPERATOR_INFERENCE_POOL_ENDPOINT_PICKER_PORT": str(picker_port),
        },
    )
    proc.start()
    yield proc
    proc.stop()


@pytest.fixture(scope="module")
def router(
    cluster: Cluster, spaces: dict[str, str], picker_port: int, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[RouterProcess]:
    logs = tmp_path_factory.mktemp("router")
    cert, key = self_signed(logs)
    # The test's client plays the gateway from the host: its address is the trusted source. TLS, as the
    # chart serves it by default.
    with router_to_a_recorder(
        cluster,
        logs,
        own_namespace=spaces["router"],
        extra_args=[
            f"--ext-proc-port={picker_port}",
            "--trusted-source=127.0.0.1",
            f"--ext-proc-tls-cert={cert}",
            f"--ext-proc-tls-key={key}",
        ],
    ) as proc:
        yield proc


PICKER_HOST = "picker.test"


def self_signed(folder: Path) -> tuple[Path, Path]:
    cert, key = folder / "tls.crt", folder / "tls.key"
    command = f"openssl req -x509 -newkey rsa:2048 -nodes -days 1 -subj /CN={PICKER_HOST}"
    names = ["-addext", f"subjectAltName=DNS:{PICKER_HOST}", "-keyout", str(key), "-out", str(cert)]
    subprocess.run([*command.split(), *names], check=True, capture_output=True)
    return cert, key


def ready_endpoints(cluster: Cluster, pool: dict[str, Any], namespace: str, count: int) -> list[str] | None:
    """The pool's endpoints as a gateway computes them: its selector's Ready pods, on its target port."""
    selector = ",".join(f"{k}={v}" for k, v in pool["spec"]["selector"]["matchLabels"].items())
    port = pool["spec"]["targetPorts"][0]["number"]
    endpoints = sorted(
        f"{p['status']['podIP']}:{port}"
        for p in cluster.list_objects("pods", namespace, selector)
        if (p.get("status") or {}).get("podIP")
        and any(
            c.get("type") == "Ready" and c.get("status") == "True"
            for c in (p.get("status") or {}).get("conditions") or []
        )
    )
    return endpoints if len(endpoints) >= count else None


def conversation(name: str, turns: int) -> bytes:
    messages: list[dict[str, str]] = [{"role": "system", "content": "You answer questions. " * 30}]
    for turn in range(turns):
        messages += [
            {"role": "user", "content": f"{name}: question {turn}"},
            {"role": "assistant", "content": f"answer {turn}"},
        ]
    return json.dumps({"model": "meta-llama/Llama-3.2-1B-Instruct", "messages": messages[:-1]}).encode()


def test_requests_through_the_pool_land_on_the_pod_of_their_prefix_and_stay_in_their_namespace(
    cluster: Cluster,
    spaces: dict[str, str],
    picker_operator: OperatorProcess,
    router: RouterProcess,
    picker_port: int,
) -> None:
    a, b = spaces["a"], spaces["b"]
    assert (
        cluster.apply(llamaservice_manifest("chat", accelerator=ACCELERATOR, replicas=3), a).returncode == 0
    )
    assert cluster.apply(llamaservice_manifest("secret", accelerator=ACCELERATOR), b).returncode == 0
    pool = eventually("team-a's InferencePool", lambda: cluster.get("inferencepool", "chat", a), 90)
    ref = pool["spec"]["endpointPickerRef"]
    assert (ref["kind"], ref["name"], ref["port"]["number"]) == ("Service", PICKER_SERVICE, picker_port)
    pool_b = eventually("team-b's InferencePool", lambda: cluster.get("inferencepool", "secret", b), 90)
    subset_a = eventually("team-a's 3 Ready pods", lambda: ready_endpoints(cluster, pool, a, 3), 120)
    subset_b = eventually("team-b's Ready pod", lambda: ready_endpoints(cluster, pool_b, b, 1), 120)

    async def scenario() -> None:
        credentials = grpc.ssl_channel_credentials(
            root_certificates=(router.log_dir / "tls.crt").read_bytes()
        )
        options = [("grpc.ssl_target_name_override", PICKER_HOST)]
        target = f"127.0.0.1:{ref['port']['number']}"
        async with grpc.aio.secure_channel(target, credentials, options=options) as channel:

            async def pick(
                body: bytes, subset: list[str], headers: dict[str, str] | None = None
            ) -> str | None:
                return wire.destination(await wire.ask_picker(channel, body, subset=subset, headers=headers))

            # The router follows the pods through its own watches: wait until it picks among all three.
            async def sees_all() -> bool:
                return await pick(conversation("probe", 1), subset_a) in subset_a

            await asyncio.wait_for(_until(sees_all), 60)
            first = {
                name: await pick(conversation(name, 1), subset_a) for name in (f"c{i}" for i in range(12))
            }
            assert set(first.values()) <= set(subset_a), first
            assert len(set(first.values())) >= 2, f"conversations spread over the pool: {first}"
            for turns in (2, 3):
                for name, pod in first.items():
                    assert await pick(conversation(name, turns), subset_a) == pod, (name, turns)
            hostile = [
                {"x-llamaservice": f"{b}/secret"},
                {":authority": f"secret.{b}.svc.cluster.local"},
                {"x-llamaservice-namespace": b},
                {"x-gateway-destination-endpoint": subset_b[0]},
            ]
            for headers in hostile:
                for name in first:
                    assert await pick(conversation(name, 1), subset_a, headers) in subset_a, headers
            assert await pick(conversation("b", 1), subset_b) in subset_b, "team-b's pool: team-b's pod"

    asyncio.run(scenario())
    assert "endpoint picker (ext_proc, TLS)" in router.tail(200)


async def _until(check: Any) -> None:
    while not await check():
        await asyncio.sleep(0.5)
