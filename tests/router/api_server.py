"""An HTTP server that answers the router's lists and watches with the JSON the Kubernetes API server writes
(what the e2e tests get from the real one), so that the real kubernetes client, urllib3 and the router's
watch loop run against it in a unit test: including what the typed client cannot read (an EndpointSlice
of a Service with no pods has `"endpoints": null`) and an outage (503 on every request, watches cut)."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

from kubernetes import client

SLICES = "/apis/discovery.k8s.io/v1/endpointslices"
PODS = "/api/v1/pods"
LLAMASERVICES = "/apis/serving.llama-operator.dev/v1alpha1/llamaservices"


class FakeApiServer:
    """Lists by path (cluster-wide paths: the router watches all namespaces when told none), watches that
    stay open until `cut_watches` (or their timeoutSeconds), and `down` answering 503 to everything."""

    def __init__(self) -> None:
        self.items: dict[str, list[dict[str, Any]]] = {SLICES: [], PODS: [], LLAMASERVICES: []}
        self.version = 1
        self.down = False
        self.requests = 0
        self._cut = threading.Event()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *_: Any) -> None:
                return None

            def do_GET(self) -> None:
                outer.requests += 1
                url = urlsplit(self.path)
                query = parse_qs(url.query)
                if outer.down or url.path not in outer.items:
                    self._json(503 if outer.down else 404, {"kind": "Status", "code": 503})
                    return
                if query.get("watch") == ["true"]:
                    self._watch(float(query.get("timeoutSeconds", ["300"])[0]))
                    return
                self._json(
                    200,
                    {
                        "kind": "List",
                        "metadata": {"resourceVersion": str(outer.version)},
                        "items": outer.items[url.path],
                    },
                )

            def _json(self, status: int, body: dict[str, Any]) -> None:
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _watch(self, seconds: float) -> None:
                # HTTP/1.0: the stream ends when the connection closes, as a watch the server ends does.
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.end_headers()
                self.wfile.flush()
                outer._cut.wait(seconds)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def api_client(self) -> client.ApiClient:
        configuration = client.Configuration()
        configuration.host = self.url
        return client.ApiClient(configuration)

    def cut_watches(self) -> None:
        """End every open watch (the API server stopping); later watches stay open again."""
        self._cut.set()
        self._cut = threading.Event()

    def close(self) -> None:
        self.cut_watches()
        self.server.shutdown()
        self.server.server_close()


@contextmanager
def fake_api_server() -> Iterator[FakeApiServer]:
    server = FakeApiServer()
    try:
        yield server
    finally:
        server.close()
