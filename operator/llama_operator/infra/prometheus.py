"""Read the autoscaler's signals from Prometheus: one query per signal per cycle, for all services.

The connection is Settings' prometheus* fields: TLS verified (the system's trust store or a CA bundle), a
bearer token or basic auth read from files (mounted Secrets; re-read when kubelet swaps them, as projected
service-account tokens rotate), extra headers (a tenant for Mimir or Thanos) and a timeout. Errors name the
setting that fixes them, and never carry a credential.
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import requests
from requests.adapters import HTTPAdapter
from requests.auth import AuthBase, HTTPBasicAuth
from urllib3.util.retry import Retry

from llama_operator.api.settings import Settings
from llama_operator.autoscale.promql import (
    Sample,
    ServiceKey,
    ServiceView,
    SignalLabels,
    assemble_signals,
    probe_query,
    resolve_kv_metric,
    signal_queries,
)
from llama_operator.autoscale.signals import Signals

log = logging.getLogger(__name__)

QUERY_PATH = "/api/v1/query"


class PrometheusUnavailableError(RuntimeError):
    pass


class PrometheusUnreachableError(PrometheusUnavailableError):
    """No answer at all (refused, reset, timed out, TLS failed), as against one query the server refused."""


class PrometheusCredentialError(PrometheusUnreachableError):
    """A credential file cannot be read: every query would fail alike."""


@dataclass
class CredentialFile:
    """A secret in a file, read again whenever the file changes (a mounted Secret is swapped atomically
    through a symlink, so a new version is a new inode)."""

    path: Path
    setting: str  # the Settings key that names the file, for errors
    _seen: tuple[int, int, int] | None = field(default=None, repr=False)
    _value: str = field(default="", repr=False)

    def read(self) -> str:
        try:
            stat = os.stat(self.path)
            if (stat.st_ino, stat.st_mtime_ns, stat.st_size) != self._seen:
                self._value = self.path.read_text().strip()
                self._seen = (stat.st_ino, stat.st_mtime_ns, stat.st_size)
        except OSError as err:
            raise PrometheusCredentialError(
                f"{self.setting}: cannot read {self.path} ({err.strerror}); mount the Secret there or fix the path"
            ) from None
        if not self._value:
            raise PrometheusCredentialError(f"{self.setting}: {self.path} is empty")
        return self._value


class BearerTokenFileAuth(AuthBase):
    def __init__(self, token: CredentialFile) -> None:
        self.token = token

    def __call__(self, request: requests.PreparedRequest) -> requests.PreparedRequest:
        request.headers["Authorization"] = f"Bearer {self.token.read()}"
        return request


class BasicAuthFilesAuth(AuthBase):
    def __init__(self, username: CredentialFile, password: CredentialFile) -> None:
        self.username, self.password = username, password

    def __call__(self, request: requests.PreparedRequest) -> requests.PreparedRequest:
        result: requests.PreparedRequest = HTTPBasicAuth(self.username.read(), self.password.read())(request)
        return result


@dataclass(frozen=True)
class PrometheusConnection:
    """Where and how to reach Prometheus: Settings' prometheus* fields."""

    url: str
    ca_file: str | None = None
    insecure_skip_verify: bool = False
    bearer_token_file: str | None = None
    basic_auth_username_file: str | None = None
    basic_auth_password_file: str | None = None
    headers: Mapping[str, str] = field(default_factory=dict)
    timeout_seconds: float = 5.0

    @classmethod
    def from_settings(cls, settings: Settings) -> PrometheusConnection:
        return cls(
            url=settings.prometheus_url,
            ca_file=settings.prometheus_ca_file,
            insecure_skip_verify=settings.prometheus_insecure_skip_verify,
            bearer_token_file=settings.prometheus_bearer_token_file,
            basic_auth_username_file=settings.prometheus_basic_auth_username_file,
            basic_auth_password_file=settings.prometheus_basic_auth_password_file,
            headers=dict(settings.prometheus_headers),
            timeout_seconds=settings.prometheus_timeout_seconds,
        )

    def auth(self) -> AuthBase | None:
        if self.bearer_token_file:
            return BearerTokenFileAuth(
                CredentialFile(Path(self.bearer_token_file), "prometheusBearerTokenFile")
            )
        if self.basic_auth_username_file and self.basic_auth_password_file:
            return BasicAuthFilesAuth(
                CredentialFile(Path(self.basic_auth_username_file), "prometheusBasicAuthUsernameFile"),
                CredentialFile(Path(self.basic_auth_password_file), "prometheusBasicAuthPasswordFile"),
            )
        return None

    def verify(self) -> bool | str:
        """requests' verify: a CA bundle, the system's trust store (True), or off."""
        if self.insecure_skip_verify:
            return False
        if self.ca_file:
            if not os.path.isfile(self.ca_file):
                raise PrometheusCredentialError(
                    f"prometheusCaFile: {self.ca_file} does not exist; mount the CA bundle there "
                    "(the chart's prometheus.ca) or fix the path"
                )
            return self.ca_file
        return True

    def credentials_hint(self) -> str:
        if self.bearer_token_file:
            return f"the token in prometheusBearerTokenFile ({self.bearer_token_file}) was refused"
        if self.basic_auth_username_file:
            return (
                "the basic-auth username/password (prometheusBasicAuthUsernameFile/PasswordFile, from the "
                "chart's prometheus.basicAuth Secret) were refused"
            )
        return (
            "no credentials are configured: set prometheusBearerTokenFile or prometheusBasicAuthUsernameFile/"
            "PasswordFile (the chart's prometheus.bearerToken or prometheus.basicAuth)"
        )

    def tls_hint(self) -> str:
        if self.ca_file:
            return (
                f"the CA bundle in prometheusCaFile ({self.ca_file}) does not verify the server's certificate"
            )
        return (
            "set prometheusCaFile to the CA bundle that signed the server's certificate (the chart's "
            "prometheus.ca mounts it from a ConfigMap or Secret)"
        )


def _samples(raw: list[dict[str, Any]]) -> list[Sample]:
    # The HTTP API returns values as strings: ["1700000000.1", "0.25"].
    return [(item.get("metric", {}), float(item["value"][1])) for item in raw]


def _error_text(response: requests.Response) -> str:
    """Prometheus's own error message when it sent one (JSON), else the start of the body."""
    try:
        body = response.json()
    except ValueError:
        return response.text.strip()[:200]
    if isinstance(body, dict) and body.get("error"):
        return f"{body.get('errorType', 'error')}: {body['error']}"
    return response.text.strip()[:200]


class PrometheusSignals:
    """Queries Prometheus; every method may raise PrometheusUnavailableError."""

    def __init__(self, connection: PrometheusConnection | str, labels: SignalLabels) -> None:
        self.connection = (
            connection if isinstance(connection, PrometheusConnection) else PrometheusConnection(connection)
        )
        self.labels = labels
        self._query_url = self.connection.url.rstrip("/") + QUERY_PATH
        self._session = requests.Session()
        self._session.headers.update(self.connection.headers)
        self._session.auth = self.connection.auth()
        # One quick retry at most: the autoscaler's cycle is seconds long, and an unreachable Prometheus
        # must read as "no data" within one cycle, not after urllib3's backoff on every query.
        adapter = HTTPAdapter(max_retries=Retry(total=1, backoff_factor=0.1))
        self._session.mount("http://", adapter)
        self._session.mount("https://", adapter)
        self.queries = 0  # queries sent so far (the autoscaler reports them per cycle)

    def close(self) -> None:
        self._session.close()

    def query(self, promql: str) -> list[Sample]:
        self.queries += 1
        conn = self.connection
        try:
            response = self._session.get(
                self._query_url,
                params={"query": promql, "timeout": f"{conn.timeout_seconds:g}s"},
                verify=conn.verify(),
                # Prometheus gives up on the query at timeout_seconds; the extra second lets its answer in.
                timeout=conn.timeout_seconds + 1,
            )
        except requests.exceptions.SSLError as err:
            raise PrometheusUnreachableError(
                f"TLS with {conn.url} failed: {_ssl_reason(err)}; {conn.tls_hint()}"
            ) from None
        except (requests.exceptions.ConnectionError, requests.exceptions.Timeout) as err:
            raise PrometheusUnreachableError(f"{conn.url}: {type(err).__name__}: {err}") from None
        except requests.exceptions.RequestException as err:
            raise PrometheusUnavailableError(f"{conn.url}: {type(err).__name__}: {err}") from None
        if response.status_code in (401, 403):
            raise PrometheusUnreachableError(
                f"{conn.url} answered {response.status_code} {response.reason}: {conn.credentials_hint()}"
            )
        if response.status_code != 200:
            raise PrometheusUnavailableError(
                f"{conn.url} answered {response.status_code} {response.reason} to {promql!r}: "
                f"{_error_text(response)}"
            )
        try:
            body = response.json()
            result: list[dict[str, Any]] = body["data"]["result"]
            return _samples(result)
        except (ValueError, KeyError, TypeError, IndexError) as err:
            raise PrometheusUnavailableError(
                f"{conn.url}{QUERY_PATH} did not answer as the Prometheus HTTP API does ({type(err).__name__}: "
                f"{err}); is prometheusUrl the API's base URL?"
            ) from None

    def fetch(
        self,
        services: Mapping[ServiceKey, ServiceView],
        *,
        window_seconds: float,
        burst_window_seconds: float | None = None,
    ) -> dict[ServiceKey, Signals]:
        """All services' signals; a query that fails leaves its signal out, which reads as no data (the
        burst window's: as no burst)."""
        kv_metric = resolve_kv_metric(self.query(probe_query()))
        results: dict[str, list[Sample]] = {}
        percentiles = {view.percentile for view in services.values()}
        for name, promql in signal_queries(
            self.labels,
            kv_metric=kv_metric,
            window_seconds=window_seconds,
            percentiles=percentiles,
            burst_window_seconds=burst_window_seconds,
            ttft_bounds={view.ttft_bound for view in services.values() if view.ttft_bound is not None},
        ).items():
            try:
                results[name] = self.query(promql)
            except PrometheusUnreachableError:
                raise  # no point asking the other queries of this cycle
            except PrometheusUnavailableError as err:
                log.warning("signal %s unavailable: %s", name, err)
        return assemble_signals(
            results,
            services,
            self.labels,
            window_seconds=window_seconds,
            burst_window_seconds=burst_window_seconds,
        )


_SSL_REASON = re.compile(r"\[SSL(?:: [A-Z_]+)?\] ([^(']+?)\s*\(_ssl")


def _ssl_reason(err: requests.exceptions.SSLError) -> str:
    """OpenSSL's own words (certificate verify failed: self-signed certificate) out of urllib3's wrapping."""
    found = _SSL_REASON.search(str(err))
    return found.group(1) if found else str(err)
