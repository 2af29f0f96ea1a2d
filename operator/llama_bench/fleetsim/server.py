"""The fleet simulator process: the engine stepped in real time, the cluster polled, HTTP served.

Three threads share the engine under one lock: the stepping loop (sleeps until the next event, at
most `MIN_SLEEP_SECONDS` granularity so a busy fleet wakes it a bounded number of times per second),
the poller (lists pods and LlamaServices every `poll_interval`), and the HTTP server (scrapes,
control). `stop()` (SIGTERM) ends all three.

Endpoints:
- `GET /pods/<namespace>/<pod>/metrics`: the pod's vLLM metrics; 503 while it loads its model
  (vLLM's server is not up yet, so Prometheus sees the target down), 404 for an unknown pod;
- `PUT /load/<namespace>/<llamaservice>`: JSON `LoadSpec`, the load offered from now on;
- `DELETE /load/<namespace>/<llamaservice>`: back to the default load;
- `GET /state`: JSON, per service: load, offered rate, counters, TTFT p95, pods;
- `GET /healthz`.
"""

from __future__ import annotations

import json
import logging
import sys
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Protocol
from urllib.parse import unquote, urlsplit

from pydantic import ValidationError

from llama_bench.fleetsim.engine import FleetEngine, PodInfo, ServiceInfo, ServiceKey
from llama_bench.fleetsim.exposition import CONTENT_TYPE
from llama_bench.fleetsim.load import LoadSpec, check

log = logging.getLogger(__name__)

MIN_SLEEP_SECONDS = 0.005
MAX_BODY_BYTES = 1 << 16


class ClusterView(Protocol):
    """Where the pods come from (`kube.ClusterReader`); may raise anything when the API is away."""

    def pods(self) -> list[PodInfo]: ...

    def services(self) -> dict[ServiceKey, ServiceInfo] | None: ...

    def close(self) -> None: ...


class _Server(ThreadingHTTPServer):
    """A scraper that gave up (its timeout) closes the connection before the answer is written: counted
    and logged once in a while, not a traceback per scrape (100 MB of log at 1,000 pods)."""

    dropped = 0

    def handle_error(self, request: Any, client_address: Any) -> None:
        error = sys.exc_info()[1]
        if isinstance(error, (BrokenPipeError, ConnectionResetError)):
            self.dropped += 1
            if self.dropped in {1, 10} or self.dropped % 1000 == 0:
                log.warning(
                    "%d answers dropped: the client had closed the connection (%s)", self.dropped, error
                )
            return
        super().handle_error(request, client_address)


class FleetSimulator:
    """The engine, a cluster reader and an HTTP server, run together until `stop()`."""

    def __init__(
        self,
        engine: FleetEngine,
        reader: ClusterView | None,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        poll_interval: float = 1.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.engine = engine
        self.reader = reader
        self.poll_interval = poll_interval
        self._epoch = clock()
        self._clock = clock
        self._cond = threading.Condition()
        self._stopping = threading.Event()
        self._threads: list[threading.Thread] = []
        self.httpd = _Server((host, port), _handler(self))
        self.httpd.daemon_threads = True
        self.polls = 0
        self.poll_errors = 0

    @property
    def port(self) -> int:
        return int(self.httpd.server_address[1])

    def now(self) -> float:
        """Seconds since the simulator started: the engine's clock."""
        return self._clock() - self._epoch

    # -- life cycle ----------------------------------------------------------------------------
    def start(self) -> None:
        for name, target in (("step", self._step_loop), ("http", self._serve)):
            self._threads.append(threading.Thread(target=target, name=f"fleet-{name}", daemon=True))
        if self.reader is not None:
            self._threads.append(threading.Thread(target=self._poll_loop, name="fleet-poll", daemon=True))
        for thread in self._threads:
            thread.start()

    def stop(self) -> None:
        """Stop serving and stepping; safe from any thread but the HTTP server's own."""
        self._stopping.set()
        with self._cond:
            self._cond.notify_all()
        self.httpd.shutdown()
        self.httpd.server_close()
        for thread in self._threads:
            thread.join(timeout=5)
        if self.reader is not None:
            self.reader.close()

    def wait(self, timeout: float | None = None) -> bool:
        """Block until `stop()` was asked for (by `request_stop`); True if it was."""
        return self._stopping.wait(timeout)

    def request_stop(self) -> None:
        """From a signal handler: wakes `wait()`; the caller then calls `stop()`."""
        self._stopping.set()

    # -- the threads ---------------------------------------------------------------------------
    def _step_loop(self) -> None:
        with self._cond:
            while not self._stopping.is_set():
                now = self.now()
                self.engine.advance(now)
                next_time = self.engine.next_event_time()
                delay = 1.0 if next_time is None else min(1.0, next_time - now)
                self._cond.wait(max(delay, MIN_SLEEP_SECONDS))

    def _serve(self) -> None:
        self.httpd.serve_forever(poll_interval=0.2)  # how soon shutdown() is noticed

    def _poll_loop(self) -> None:
        assert self.reader is not None
        while not self._stopping.is_set():
            started = time.monotonic()
            self.poll_once()
            self._stopping.wait(max(0.0, self.poll_interval - (time.monotonic() - started)))

    def poll_once(self) -> None:
        assert self.reader is not None
        try:
            pods = self.reader.pods()
            services = self.reader.services()
        except Exception as err:  # the API server may be restarting: keep the last view, try again
            self.poll_errors += 1
            if self.poll_errors in {1, 10} or self.poll_errors % 100 == 0:
                log.warning("listing pods failed (%d so far): %s", self.poll_errors, err)
            return
        self.sync(pods, services)

    def sync(self, pods: Iterable[PodInfo], services: Mapping[ServiceKey, ServiceInfo] | None) -> None:
        """Apply one view of the cluster (the poller's, or a test's)."""
        with self._cond:
            self.engine.sync(pods, services, self.now())
            self.polls += 1
            self._cond.notify_all()

    # -- what the handlers call ----------------------------------------------------------------
    def metrics(self, namespace: str, pod: str) -> tuple[int, str]:
        with self._cond:
            self.engine.advance(self.now())
            phase = self.engine.pod_phase(namespace, pod)
            body = self.engine.pod_metrics(namespace, pod)
        if phase is None:
            return 404, f"no pod {namespace}/{pod} in the simulated fleet\n"
        if body is None:
            return 503, f"pod {namespace}/{pod} is loading its model\n"
        return 200, body

    def set_load(self, namespace: str, service: str, spec: LoadSpec | None) -> dict[str, Any]:
        with self._cond:
            if spec is None:
                self.engine.clear_load((namespace, service), self.now())
            else:
                self.engine.set_load((namespace, service), spec, self.now())
            self._cond.notify_all()  # the next arrival may be sooner than the loop's wake-up
            return self.state_of(namespace, service)

    def state(self) -> dict[str, Any]:
        with self._cond:
            state = self.engine.state(self.now())
        state["polls"] = self.polls
        state["poll_errors"] = self.poll_errors
        state["answers_dropped"] = self.httpd.dropped
        return state

    def state_of(self, namespace: str, service: str) -> dict[str, Any]:
        for entry in self.engine.state(self.now())["services"]:
            if entry["namespace"] == namespace and entry["name"] == service:
                return dict(entry)
        return {}


def _handler(sim: FleetSimulator) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        server_version = "llama-operator-fleet-sim"

        def log_message(self, format: str, *args: Any) -> None:
            log.debug("%s " + format, self.address_string(), *args)

        def _send(self, status: int, body: str, content_type: str = "text/plain; charset=utf-8") -> None:
            data = body.encode()
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def _json(self, status: int, payload: Any) -> None:
            self._send(status, json.dumps(payload, indent=1) + "\n", "application/json")

        def _parts(self) -> list[str]:
            return [unquote(p) for p in urlsplit(self.path).path.split("/") if p]

        def do_GET(self) -> None:
            parts = self._parts()
            if len(parts) >= 4 and parts[0] == "pods":
                # /pods/<ns>/<pod>/<the pod's prometheus.io/path>, /metrics for the operator's pods.
                status, body = sim.metrics(parts[1], parts[2])
                self._send(status, body, CONTENT_TYPE if status == 200 else "text/plain; charset=utf-8")
            elif parts == ["state"]:
                self._json(200, sim.state())
            elif parts == ["healthz"]:
                self._send(200, "ok\n")
            else:
                self._send(404, "not found\n")

        def do_PUT(self) -> None:
            parts = self._parts()
            if len(parts) != 3 or parts[0] != "load":
                self._send(404, "PUT /load/<namespace>/<llamaservice>\n")
                return
            length = int(self.headers.get("Content-Length") or 0)
            if length > MAX_BODY_BYTES:
                self._send(413, "body too large\n")
                return
            try:
                spec = LoadSpec.model_validate_json(self.rfile.read(length) or b"{}")
                check(spec)
            except (ValidationError, ValueError) as err:
                self._json(400, {"error": str(err)})
                return
            try:
                state = sim.set_load(parts[1], parts[2], spec)
            except ValueError as err:  # e.g. a trace slice without requests
                self._json(400, {"error": str(err)})
                return
            self._json(200, state)

        def do_DELETE(self) -> None:
            parts = self._parts()
            if len(parts) != 3 or parts[0] != "load":
                self._send(404, "DELETE /load/<namespace>/<llamaservice>\n")
                return
            self._json(200, sim.set_load(parts[1], parts[2], None))

    return Handler
