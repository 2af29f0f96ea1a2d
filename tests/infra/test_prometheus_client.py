"""The operator's Prometheus client on the wire: what it sends (credentials from files, re-read when they
change; extra headers) and what its errors say, against a local HTTP server that records each request
and answers as the Prometheus HTTP API does. TLS and basic auth against a real Prometheus are in
e2e/test_prometheus_tls.py."""

from __future__ import annotations

import base64
import json
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import pytest
from pydantic import ValidationError

from llama_operator.api.settings import Settings
from llama_operator.autoscale.promql import SignalLabels
from llama_operator.infra.prometheus import (
    PrometheusConnection,
    PrometheusCredentialError,
    PrometheusSignals,
    PrometheusUnavailableError,
    PrometheusUnreachableError,
)

TOKEN = "token-one-abc"
VECTOR: dict[str, object] = {
    "status": "success",
    "data": {"resultType": "vector", "result": [{"metric": {}, "value": [1, "42"]}]},
}


@dataclass
class FakePrometheusApi:
    """Answers /api/v1/query; `accept` decides which Authorization header gets a 200."""

    url: str = ""
    requests: list[dict[str, str]] = field(default_factory=list)
    queries: list[dict[str, list[str]]] = field(default_factory=list)
    accept: str | None = None  # the Authorization value that is let in; None: any
    answer: tuple[int, dict[str, object]] = (200, VECTOR)


@pytest.fixture
def api() -> Iterator[FakePrometheusApi]:
    state = FakePrometheusApi()

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            state.requests.append({k.lower(): v for k, v in self.headers.items()})
            parts = urlsplit(self.path)
            state.queries.append(parse_qs(parts.query))
            if state.accept is not None and self.headers.get("Authorization") != state.accept:
                self._send(401, b"Unauthorized\n", "text/plain")
                return
            status, body = state.answer if parts.path == "/api/v1/query" else (404, {"error": "no such path"})
            self._send(status, json.dumps(body).encode(), "application/json")

        def _send(self, status: int, body: bytes, content_type: str) -> None:
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    state.url = f"http://127.0.0.1:{server.server_address[1]}"
    yield state
    server.shutdown()
    server.server_close()


def client(connection: PrometheusConnection) -> PrometheusSignals:
    return PrometheusSignals(connection, SignalLabels())


def mounted_secret(directory: Path, files: dict[str, str]) -> None:
    """Write files as kubelet updates a mounted Secret: a new timestamped directory, then one atomic
    rename of the ..data symlink (the keys are symlinks through ..data)."""
    version = directory / f"..2026_12_03_{len(list(directory.glob('..2026_*')))}"
    version.mkdir(parents=True)
    for name, content in files.items():
        (version / name).write_text(content)
    tmp = directory / "..data_tmp"
    tmp.symlink_to(version.name)
    tmp.rename(directory / "..data")
    for name in files:
        link = directory / name
        if not link.is_symlink():
            link.symlink_to(f"..data/{name}")


def test_bearer_token_file_is_sent_and_read_again_when_the_secret_rotates(
    api: FakePrometheusApi, tmp_path: Path
) -> None:
    mounted_secret(tmp_path, {"token": TOKEN + "\n"})
    prometheus = client(PrometheusConnection(api.url, bearer_token_file=str(tmp_path / "token")))
    api.accept = f"Bearer {TOKEN}"
    assert prometheus.query("vector(42)") == [({}, 42.0)]

    mounted_secret(tmp_path, {"token": "token-two-def"})
    with pytest.raises(PrometheusUnreachableError) as refused:
        prometheus.query("vector(42)")  # the rotated token is sent; this server still wants the old one
    assert api.requests[-1]["authorization"] == "Bearer token-two-def"
    assert "401" in str(refused.value) and "prometheusBearerTokenFile" in str(refused.value)
    assert "token-two-def" not in str(refused.value)

    api.accept = "Bearer token-two-def"
    assert prometheus.query("vector(42)") == [({}, 42.0)]


def test_basic_auth_from_files_and_extra_headers(api: FakePrometheusApi, tmp_path: Path) -> None:
    mounted_secret(tmp_path, {"username": "operator", "password": "s3cret"})
    api.accept = "Basic " + base64.b64encode(b"operator:s3cret").decode()
    prometheus = client(
        PrometheusConnection(
            api.url + "/prometheus/",  # a path prefix (Mimir's /prometheus) is kept
            basic_auth_username_file=str(tmp_path / "username"),
            basic_auth_password_file=str(tmp_path / "password"),
            headers={"X-Scope-OrgID": "team-a"},
            timeout_seconds=2.5,
        )
    )
    api.answer = (200, VECTOR)
    with pytest.raises(PrometheusUnavailableError, match="404"):
        prometheus.query("vector(42)")  # /prometheus/api/v1/query: this server has no prefix
    assert api.requests[-1]["x-scope-orgid"] == "team-a"
    assert api.queries[-1]["timeout"] == ["2.5s"]

    prometheus = client(
        PrometheusConnection(
            api.url,
            basic_auth_username_file=str(tmp_path / "username"),
            basic_auth_password_file=str(tmp_path / "password"),
        )
    )
    assert prometheus.query("vector(42)") == [({}, 42.0)]
    mounted_secret(tmp_path, {"username": "operator", "password": "wrong"})
    with pytest.raises(PrometheusUnreachableError) as refused:
        prometheus.query("vector(42)")
    message = str(refused.value)
    assert "401 Unauthorized" in message and "prometheus.basicAuth" in message
    assert "wrong" not in message and "s3cret" not in message


def test_no_credentials_configured_says_which_settings_to_set(api: FakePrometheusApi) -> None:
    api.accept = "Bearer something"
    with pytest.raises(
        PrometheusUnreachableError, match="no credentials are configured: set prometheusBearer"
    ):
        client(PrometheusConnection(api.url)).query("up")
    assert "authorization" not in api.requests[-1]


def test_a_missing_credential_file_names_the_setting(api: FakePrometheusApi, tmp_path: Path) -> None:
    prometheus = client(PrometheusConnection(api.url, bearer_token_file=str(tmp_path / "absent")))
    with pytest.raises(PrometheusCredentialError, match=r"prometheusBearerTokenFile: cannot read .*absent"):
        prometheus.query("up")
    assert api.requests == []  # nothing was sent without the token
    with pytest.raises(PrometheusCredentialError, match=r"prometheusCaFile: .*ca\.pem does not exist"):
        client(PrometheusConnection(api.url, ca_file=str(tmp_path / "ca.pem"))).query("up")


def test_prometheus_error_body_is_quoted(api: FakePrometheusApi) -> None:
    api.answer = (400, {"status": "error", "errorType": "bad_data", "error": 'parse error: unexpected "}"'})
    with pytest.raises(PrometheusUnavailableError) as failed:
        client(PrometheusConnection(api.url)).query("sum(}")
    assert not isinstance(failed.value, PrometheusUnreachableError)  # one query refused, not the server
    assert "400" in str(failed.value) and 'bad_data: parse error: unexpected "}"' in str(failed.value)


def test_not_the_prometheus_api_says_so(api: FakePrometheusApi) -> None:
    api.answer = (200, {"hello": "grafana"})
    with pytest.raises(PrometheusUnavailableError, match="is prometheusUrl the API's base URL"):
        client(PrometheusConnection(api.url)).query("up")


def test_connection_from_settings() -> None:
    settings = Settings.model_validate(
        {
            "prometheusUrl": "https://thanos.monitoring.svc:10902",
            "prometheusCaFile": "/etc/ca/ca.crt",
            "prometheusBearerTokenFile": "/var/run/secrets/kubernetes.io/serviceaccount/token",
            "prometheusHeaders": {"X-Scope-OrgID": "team-a"},
            "prometheusTimeoutSeconds": 10,
        }
    )
    connection = PrometheusConnection.from_settings(settings)
    assert connection == PrometheusConnection(
        url="https://thanos.monitoring.svc:10902",
        ca_file="/etc/ca/ca.crt",
        bearer_token_file="/var/run/secrets/kubernetes.io/serviceaccount/token",
        headers={"X-Scope-OrgID": "team-a"},
        timeout_seconds=10.0,
    )
    assert Settings().prometheus_insecure_skip_verify is False  # TLS is verified unless opted out


@pytest.mark.parametrize(
    ("config", "message"),
    [
        ({"prometheusHeaders": {"authorization": "Bearer x"}}, "authorization: credentials do not belong"),
        ({"prometheusBasicAuthUsernameFile": "/u"}, "prometheusBasicAuthPasswordFile go together"),
        (
            {
                "prometheusBearerTokenFile": "/t",
                "prometheusBasicAuthUsernameFile": "/u",
                "prometheusBasicAuthPasswordFile": "/p",
            },
            "keep one of them",
        ),
        ({"prometheusInsecureSkipVerify": True, "prometheusCaFile": "/ca"}, "the CA would be ignored"),
        ({"prometheusUrl": "prometheus:9090"}, "is not an http:// or https:// URL"),
        ({"prometheusTimeoutSeconds": 0}, "prometheusTimeoutSeconds\n  Input should be greater than 0"),
    ],
)
def test_bad_connection_settings_are_refused_naming_the_field(
    config: dict[str, object], message: str
) -> None:
    with pytest.raises(ValidationError, match=message):
        Settings.model_validate(config)
