"""The router as a child process, a recording upstream, and clients that call from a pod's address.

Pods on the local cluster are kwok's: they have addresses (10.244.0.0/16) but no network. A test that must
call the router *from a pod* adds that pod's address to the loopback interface (root only) and binds its
client socket to it: the router then sees the pod's address as the TCP source, exactly as it would in a
cluster."""

from __future__ import annotations

import http.client
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Protocol, TypeVar

from localcluster.util import log_tail
from support import Cluster, OperatorProcess, eventually, free_port, wait_healthz


@dataclass
class RouterProcess:
    """`llama-operator router` (or `activator`, its other name) as a child process."""

    cluster: Cluster
    log_dir: Path
    upstream: str  # --upstream-override: every request goes there
    own_namespace: str  # where its demand Leases go (the operator reads them there)
    extra_args: list[str] = field(default_factory=list)
    command: str = "router"  # or "activator", its other name
    name: str = "router"  # its logs: NAME-START.log (several routers may share a folder)
    # 0.0.0.0: reachable from the pod addresses a test puts on loopback (on_loopback).
    listen_address: str = "0.0.0.0"
    ready_timeout: float | None = None  # a bound on its start (default: wait while it makes progress)
    port: int = 0
    admin_port: int = 0
    proc: subprocess.Popen[bytes] | None = None
    starts: int = 0
    started_seconds: float = 0.0  # from the process's start to its /readyz answering 200, last start

    @property
    def log(self) -> Path:
        return self.log_dir / f"{self.name}-{self.starts}.log"

    @property
    def address(self) -> tuple[str, int]:
        return ("127.0.0.1", self.port)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> None:
        self.starts += 1
        self.port, self.admin_port = free_port(), free_port()
        cmd = [
            sys.executable,
            "-m",
            "llama_operator",
            self.command,
            f"--port={self.port}",
            f"--admin-port={self.admin_port}",
            f"--listen-address={self.listen_address}",
            "--demand-interval=1",
            f"--upstream-override={self.upstream}",
            f"--own-namespace={self.own_namespace}",
            *self.extra_args,
        ]
        env = {**os.environ, "KUBECONFIG": str(self.cluster.info.kubeconfig)}
        started = time.monotonic()
        with self.log.open("wb") as out:
            self.proc = subprocess.Popen(
                cmd, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
            )
        # Ready once its watches listed LlamaServices, EndpointSlices and every Pod: slow on a busy API server.
        wait_healthz(f"the {self.command}", self.proc, self.readyz_url, self.log, at_most=self.ready_timeout)
        self.started_seconds = time.monotonic() - started

    @property
    def readyz_url(self) -> str:
        return f"http://127.0.0.1:{self.admin_port}/readyz"

    def readyz(self) -> tuple[int, str]:
        try:
            with urllib.request.urlopen(self.readyz_url, timeout=5) as r:
                return int(r.status), r.read().decode()
        except urllib.error.HTTPError as err:
            return err.code, err.read().decode()

    def stop(self, sig: int = signal.SIGTERM) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        os.killpg(self.proc.pid, sig)
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=10)

    def tail(self, lines: int = 40) -> str:
        return log_tail(self.log, lines)

    def metrics(self) -> str:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.admin_port}/metrics", timeout=5) as r:
            return str(r.read().decode())

    def rss_mib(self) -> float:
        assert self.proc is not None
        for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
        return 0.0


class RecordingUpstream:
    """An OpenAI-shaped upstream that records every request it gets (the router's only destination here,
    through --upstream-override): what reached 'vLLM' is what it saw."""

    def __init__(self) -> None:
        self.seen: list[dict[str, Any]] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *_: Any) -> None:
                return None

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                outer.seen.append({"path": self.path, "headers": dict(self.headers), "body": body})
                out = b'data: {"choices": [{"text": "hi"}]}\n\ndata: [DONE]\n\n'
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Content-Length", str(len(out)))
                self.end_headers()
                self.wfile.write(out)

            def do_GET(self) -> None:
                if self.path == "/metrics":  # the router's load scrape: not a request that reached "vLLM"
                    self.send_response(404)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                self.do_POST()

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


class Process(Protocol):
    def start(self) -> None: ...

    def stop(self) -> object: ...


P = TypeVar("P", bound=Process)


@contextmanager
def running(proc: P) -> Iterator[P]:
    """A child process (the operator, a router, the fleet simulator) started, and stopped on the way out."""
    proc.start()
    try:
        yield proc
    finally:
        proc.stop()


@contextmanager
def router_to_a_recorder(
    cluster: Cluster, log_dir: Path, own_namespace: str, extra_args: list[str]
) -> Iterator[RouterProcess]:
    """A running router whose every request goes to a RecordingUpstream (for tests that look only at what
    the router answers), both stopped on the way out."""
    upstream = RecordingUpstream()
    try:
        with running(RouterProcess(cluster, log_dir, upstream.url, own_namespace, extra_args)) as proc:
            yield proc
    finally:
        upstream.close()


@contextmanager
def namespaces(cluster: Cluster, **prefixes: str) -> Iterator[dict[str, str]]:
    """Namespaces named by role (`router="router"` gives `{"router": "router-1a2b3c"}`), one suffix for the
    lot, deleted on the way out."""
    suffix = uuid.uuid4().hex[:6]
    names = {role: f"{prefix}-{suffix}" for role, prefix in prefixes.items()}
    for ns in names.values():
        cluster.kubectl("create", "namespace", ns)
    try:
        yield names
    finally:
        for ns in names.values():
            cluster.kubectl("delete", "namespace", ns, "--wait=false", check=False)


def router_stand_in(cluster: Cluster, namespace: str, service: str) -> None:
    """The router's Deployment (two replicas) and Service as the chart makes them, in `namespace`, their pods
    run by kwok: the operator routes a Service at zero to those pods, and scales to zero only while the
    router has a ready one. The tests run the router itself as processes beside them."""
    manifest = f"""
apiVersion: apps/v1
kind: Deployment
metadata: {{name: {service}}}
spec:
  replicas: 2
  selector: {{matchLabels: {{app.kubernetes.io/name: llama-operator-activator}}}}
  template:
    metadata: {{labels: {{app.kubernetes.io/name: llama-operator-activator}}}}
    spec:
      nodeSelector: {{kubernetes.io/hostname: cpu-1}}
      containers:
        - {{name: activator, image: llama-operator, ports: [{{name: http, containerPort: 8000}}]}}
---
apiVersion: v1
kind: Service
metadata: {{name: {service}}}
spec:
  selector: {{app.kubernetes.io/name: llama-operator-activator}}
  ports: [{{name: http, port: 8000, targetPort: http}}]
"""
    assert cluster.apply(manifest, namespace).returncode == 0


def operator_for_zero(
    cluster: Cluster, log_dir: Path, router_namespace: str, router_service: str, *, cold_start_seconds: int
) -> OperatorProcess:
    """The operator as the scale-to-zero tests run it: it routes a Service at zero to the router stand-in
    and reads the routers' demand Leases in `router_namespace`; a new pod is Ready `cold_start_seconds`
    after it runs (kwok); a 20 s signal window."""
    return OperatorProcess(
        cluster,
        log_dir=log_dir,
        extra_env={
            "LLAMA_OPERATOR_ACTIVATOR_SERVICE": router_service,
            "LLAMA_OPERATOR_ACTIVATOR_NAMESPACE": router_namespace,
            "LLAMA_OPERATOR_AUTOSCALE_INTERVAL_SECONDS": "2",
            "LLAMA_OPERATOR_SIGNAL_WINDOW_SECONDS": "20",
            "LLAMA_OPERATOR_POD_ANNOTATIONS": json.dumps(
                {"pod-ready.stage.kwok.x-k8s.io/delay": f"{cold_start_seconds}s"}
            ),
        },
    )


def pod_ip(cluster: Cluster, name: str, namespace: str) -> str:
    def running() -> str | None:
        pod = cluster.get("pod", name, namespace) or {}
        return (pod.get("status") or {}).get("podIP")

    return eventually(f"pod {namespace}/{name} has an address", running, 60)


def client_pod(cluster: Cluster, namespace: str, name: str = "client") -> str:
    """A plain pod (kwok runs it on a CPU node) standing for an application's pod; its address."""
    manifest = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "nodeSelector": {"kubernetes.io/hostname": "cpu-1"},
            "containers": [{"name": "app", "image": "app"}],
        },
    }
    assert cluster.apply(manifest, namespace).returncode == 0
    return pod_ip(cluster, name, namespace)


@contextmanager
def on_loopback(*addresses: str) -> Iterator[None]:
    """The addresses on `lo` for the duration (root): sockets can then be bound to them."""
    added = []
    try:
        for address in addresses:
            done = subprocess.run(
                ["ip", "addr", "add", f"{address}/32", "dev", "lo"],
                check=False,
                capture_output=True,
                text=True,
            )
            if done.returncode == 0:
                added.append(address)
            elif "File exists" not in done.stderr:
                raise RuntimeError(f"ip addr add {address}: {done.stderr}")
        yield
    finally:
        for address in added:
            subprocess.run(
                ["ip", "addr", "del", f"{address}/32", "dev", "lo"], capture_output=True, check=False
            )


@dataclass
class Reply:
    status: int
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)


def call(
    router: tuple[str, int],
    *,
    source: str,
    method: str = "POST",
    path: str = "/v1/chat/completions",
    host: str = "llama-router.llama-system:8000",
    headers: dict[str, str] | None = None,
    body: bytes | dict[str, Any] | None = None,
    timeout: float = 30,
) -> Reply:
    """One HTTP/1.1 request over a socket bound to `source` (a pod's address on loopback)."""
    data = json.dumps(body).encode() if isinstance(body, dict) else body
    conn = http.client.HTTPConnection(router[0], router[1], timeout=timeout, source_address=(source, 0))
    try:
        sent = {"Host": host, **({"Content-Type": "application/json"} if isinstance(body, dict) else {})}
        conn.request(method, path, body=data, headers={**sent, **(headers or {})})
        response = conn.getresponse()
        return Reply(response.status, dict(response.getheaders()), response.read())
    finally:
        conn.close()


def raw_connection(router: tuple[str, int], source: str) -> socket.socket:
    sock = socket.socket()
    sock.bind((source, 0))
    sock.connect(router)
    return sock
