"""The router's limits, end to end: the router process against the local cluster's API server, a
LlamaService with no ready pod (every request to it is held), and clients that try what knocked the
activator over in the issue: 63 MiB bodies, thousands of held requests, connections that never finish their
headers, bodies that never finish, a tenant's hour-long activation timeout.

The client calls from 127.0.0.1, trusted as a gateway would be (--trusted-source): tenancy is
e2e/test_router_tenancy.py's subject; here only the limits are."""

from __future__ import annotations

import threading
import time
import urllib.request
import uuid
from collections.abc import Iterator

import pytest

from router_support import Reply, RouterProcess, call, raw_connection, router_to_a_recorder
from support import Cluster, llamaservice_manifest

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(300)]

MIB = 2**20


@pytest.fixture(scope="module")
def limits_ns(cluster: Cluster) -> Iterator[str]:
    ns = f"limits-{uuid.uuid4().hex[:6]}"
    cluster.kubectl("create", "namespace", ns)
    for name, timeout in (("held", 3600), ("other", 3600)):
        # No node has this accelerator: whatever operator runs, no pod of these services is ever ready, so
        # every request to them is held.
        manifest = llamaservice_manifest(
            name,
            accelerator={"type": "a100-40gb", "mig": "1g.5gb"},
            autoscaling={"minReplicas": 0, "maxReplicas": 1, "activationTimeoutSeconds": timeout},
        )
        assert cluster.apply(manifest, ns).returncode == 0
    yield ns
    cluster.kubectl("delete", "namespace", ns, "--wait=false", check=False)


@pytest.fixture(scope="module")
def router(
    cluster: Cluster, limits_ns: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[RouterProcess]:
    with router_to_a_recorder(
        cluster,
        tmp_path_factory.mktemp("router"),
        own_namespace=limits_ns,
        extra_args=[
            "--trusted-source=127.0.0.1",
            "--max-body-mib=8",
            "--max-held-requests=30",
            "--max-held-requests-per-service=20",
            "--max-held-mib-per-service=4",
            "--max-hold-seconds=6",
            "--header-timeout=2",
            "--body-timeout=2",
            "--namespace-share=1",  # both services are one namespace's: the router's own totals are tested
        ],
    ) as proc:
        yield proc


def post(router: RouterProcess, ns: str, name: str, body: bytes, timeout: float = 30) -> Reply:
    return call(
        router.address,
        source="127.0.0.1",
        headers={"X-LlamaService": f"{ns}/{name}", "Content-Type": "application/json"},
        body=body,
        timeout=timeout,
    )


def in_threads(n: int, fn: object) -> tuple[list[threading.Thread], list[object]]:
    out: list[object] = []

    def run() -> None:
        try:
            out.append(fn())  # type: ignore[operator]
        except Exception as err:
            out.append(err)

    threads = [threading.Thread(target=run, daemon=True) for _ in range(n)]
    for thread in threads:
        thread.start()
    return threads, out


def test_big_bodies_are_refused_and_memory_stays_flat(router: RouterProcess, limits_ns: str) -> None:
    rss_before = router.rss_mib()
    big = b'{"model": "m", "prompt": "' + b"x" * (63 * MIB) + b'"}'
    threads, outcomes = in_threads(8, lambda: post(router, limits_ns, "held", big))
    for thread in threads:
        thread.join(timeout=60)
    statuses = [o.status if isinstance(o, Reply) else type(o).__name__ for o in outcomes]
    # 413 as soon as Content-Length says so (the client may see its send cut instead: never a 200 or a hold).
    assert all(s == 413 or s in ("ConnectionResetError", "BrokenPipeError") for s in statuses), statuses
    assert 413 in statuses
    grown = router.rss_mib() - rss_before
    print(f"\neight 63 MiB POSTs: RSS {rss_before:.0f} -> {router.rss_mib():.0f} MiB")
    assert grown < 40, f"RSS grew {grown:.0f} MiB"


def test_bodies_nested_too_deep_leak_nothing(router: RouterProcess, limits_ns: str) -> None:
    """Eight bodies of 8 MiB nested 4 Mi levels deep (they made json.loads raise after their bytes were
    counted: 500, and the router's 64 MiB of buffered bytes lost for good): 400 naming the limit, and a
    request after them is held, not refused for want of buffered bytes."""
    half = 4 * MIB - 8
    deep = b'{"a":' + b"[" * half + b"]" * half + b"}"
    threads, outcomes = in_threads(8, lambda: post(router, limits_ns, "held", deep))
    for thread in threads:
        thread.join(timeout=60)
    assert [o.status if isinstance(o, Reply) else o for o in outcomes] == [400] * 8, outcomes
    assert all(b"nests deeper than 64 levels" in o.body for o in outcomes if isinstance(o, Reply))
    threads, after = in_threads(1, lambda: post(router, limits_ns, "held", b'{"model": "m"}'))
    for thread in threads:
        thread.join(timeout=30)
    assert isinstance(after[0], Reply) and b"activationTimeoutSeconds" in after[0].body, after
    assert urllib.request.urlopen(f"http://127.0.0.1:{router.admin_port}/readyz", timeout=5).status == 200


def test_held_requests_and_bytes_are_capped_with_503_and_retry_after(
    router: RouterProcess, limits_ns: str
) -> None:
    body = b'{"model": "m", "prompt": "' + b"y" * (MIB // 2) + b'"}'  # ~0.5 MiB: eight fill 4 MiB
    threads, outcomes = in_threads(12, lambda: post(router, limits_ns, "held", body))
    time.sleep(2.0)
    held = [line for line in router.metrics().splitlines() if line.startswith("llama_router_held_requests{")]
    assert held and 6 <= float(held[0].rsplit(" ", 1)[1]) <= 8, (held, outcomes)
    refused = [o for o in outcomes if isinstance(o, Reply)]
    assert len(refused) >= 4 and all(r.status == 503 and r.headers.get("Retry-After") for r in refused), (
        refused
    )
    assert b"per-service" in refused[0].body
    # Many small held requests: the per-service count, then the router's total.
    small = b'{"model": "m"}'
    t2, o2 = in_threads(20, lambda: post(router, limits_ns, "held", small))
    t3, o3 = in_threads(25, lambda: post(router, limits_ns, "other", small))
    time.sleep(2.0)
    refused2 = [o for o in o2 + o3 if isinstance(o, Reply)]
    assert all(r.status == 503 for r in refused2), refused2
    total = sum(
        float(line.rsplit(" ", 1)[1])
        for line in router.metrics().splitlines()
        if line.startswith("llama_router_held_requests{")
    )
    assert total <= 30, f"{total} held, over --max-held-requests=30"
    # The hold time is the platform's cap (6 s), not the tenant's 3600 s.
    for thread in threads + t2 + t3:
        thread.join(timeout=20)
    timed_out = [
        o for o in outcomes + o2 + o3 if isinstance(o, Reply) and b"activationTimeoutSeconds" in o.body
    ]
    assert timed_out and all(r.status == 503 for r in timed_out)


def test_connections_that_never_finish_headers_or_bodies_are_closed(
    router: RouterProcess, limits_ns: str
) -> None:
    socks = []
    for _ in range(300):
        sock = raw_connection(router.address, "127.0.0.1")
        sock.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nX-Slow: ")
        socks.append(sock)
    started = time.monotonic()
    closed = 0
    for sock in socks:
        sock.settimeout(max(0.1, 8 - (time.monotonic() - started)))
        try:
            if sock.recv(1024) == b"":
                closed += 1
        except TimeoutError:
            pass
        except ConnectionResetError:
            closed += 1
        sock.close()
    assert closed == 300, f"{closed} of 300 unfinished-header connections closed by the router within 8 s"
    # A body announced and never sent: 408 after --body-timeout.
    sock = raw_connection(router.address, "127.0.0.1")
    sock.sendall(
        f"POST /v1/completions HTTP/1.1\r\nHost: x\r\nX-LlamaService: {limits_ns}/held\r\n"
        'Content-Type: application/json\r\nContent-Length: 1000\r\n\r\n{"model"'.encode()
    )
    sock.settimeout(10)
    started = time.monotonic()
    answer = sock.recv(4096)
    sock.close()
    assert answer.startswith(b"HTTP/1.1 408"), answer[:200]
    assert 1.5 <= time.monotonic() - started < 6
