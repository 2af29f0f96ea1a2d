"""Wake from zero through the endpoint picker, end to end on the local cluster (issue 45): a gateway asks the
router's picker (Envoy ext_proc) for a LlamaService at zero; with no subset to name (the pool has no pod),
the route names the service (`X-LlamaService: namespace/name`); the picker holds the request, reports the
demand, the operator wakes a replica, and the picker answers with that new pod's address.

The service at zero, the operator and the fleet simulator are test_router_resync.py's (its fixtures, used
here as they are); the client is ext_proc_wire.ask_picker, the messages a gateway sends."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Iterator

import grpc
import pytest

from llama_operator.router import ext_proc_wire as wire
from router_support import RecordingUpstream, RouterProcess, running
from support import Cluster, free_port
from test_router_resync import (  # the module's fixtures: a LlamaService at zero and what keeps it there
    NAME,
    at_zero,
    fleet,
    resync_operator,
    spaces,
    upstream,
)

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(600)]
__all__ = ["at_zero", "fleet", "resync_operator", "spaces", "upstream"]


@pytest.fixture(scope="module")
def picker_router(
    at_zero: str,
    cluster: Cluster,
    upstream: RecordingUpstream,
    spaces: dict[str, str],
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[RouterProcess, int]]:
    port = free_port()
    proc = RouterProcess(
        cluster,
        log_dir=tmp_path_factory.mktemp("router"),
        own_namespace=spaces["router"],
        upstream=upstream.url,
        listen_address="127.0.0.1",
        extra_args=["--trusted-source=127.0.0.1", f"--ext-proc-port={port}"],
        ready_timeout=60,
    )
    with running(proc):
        yield proc, port


def test_the_picker_holds_a_request_for_a_service_at_zero_and_answers_with_the_pod_it_woke(
    cluster: Cluster, at_zero: str, picker_router: tuple[RouterProcess, int]
) -> None:
    ns = at_zero
    assert not cluster.pods_of(NAME, ns), "at zero"
    _router, port = picker_router
    body = json.dumps({"model": "meta-llama/Llama-3.2-1B-Instruct", "prompt": "wake up"}).encode()

    async def ask() -> list[wire.Answer]:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            return await wire.ask_picker(channel, body, headers={"x-llamaservice": f"{ns}/{NAME}"})

    started = time.monotonic()
    answers = asyncio.run(asyncio.wait_for(ask(), 150))
    chosen = wire.destination(answers)
    assert chosen is not None, answers[:1]
    pods = cluster.pods_of(NAME, ns)
    assert [f"{p['status']['podIP']}:8000" for p in pods] == [chosen], (chosen, pods)
    print(f"picked the woken pod {chosen} {time.monotonic() - started:.1f}s after the request")
