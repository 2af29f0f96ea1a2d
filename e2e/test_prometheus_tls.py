"""The operator's Prometheus client against a real Prometheus (the local cluster's build) serving HTTPS with
basic auth (--web.config.file): a self-signed CA made with openssl, the password bcrypt-hashed as the
web config wants. The client verifies TLS by default, says which setting fixes a failure, and never
repeats the password. The chart test checks that the Secrets are mounted and only their paths are in
the ConfigMap."""

from __future__ import annotations

import shutil
import subprocess
import time
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import requests
import yaml

from llama_operator.autoscale.promql import SignalLabels
from llama_operator.infra.config import load_settings
from llama_operator.infra.prometheus import (
    PrometheusConnection,
    PrometheusSignals,
    PrometheusUnreachableError,
)
from localcluster import info as cluster_info
from support import free_port, repo_root

pytestmark = pytest.mark.beside_operators

USERNAME = "llama-operator"
PASSWORD = "correct horse battery staple"


@dataclass(frozen=True)
class SecuredPrometheus:
    url: str
    ca_file: Path
    username_file: Path
    password_file: Path


def openssl(*args: str | Path) -> None:
    subprocess.run(["openssl", *map(str, args)], check=True, capture_output=True)


def make_pki(directory: Path) -> tuple[Path, Path, Path]:
    """A CA and a serving certificate for 127.0.0.1/localhost signed by it."""
    ca_key, ca_crt = directory / "ca.key", directory / "ca.crt"
    key, csr, crt = directory / "server.key", directory / "server.csr", directory / "server.crt"
    ec = ("-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256")
    openssl("genpkey", *ec, "-out", ca_key)
    openssl(
        "req", "-x509", "-new", "-key", ca_key, "-subj", "/CN=e2e-prometheus-ca", "-days", "2", "-out", ca_crt
    )
    openssl("genpkey", *ec, "-out", key)
    openssl("req", "-new", "-key", key, "-subj", "/CN=127.0.0.1", "-out", csr)
    ext = directory / "server.ext"
    ext.write_text("subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth\n")
    openssl(
        "x509", "-req", "-in", csr, "-CA", ca_crt, "-CAkey", ca_key, "-CAcreateserial",
        "-days", "2", "-extfile", ext, "-out", crt,
    )  # fmt: skip
    return ca_crt, crt, key


def bcrypt_hash(password: str) -> str:
    """bcrypt, as Prometheus's basic_auth_users want: libxcrypt's through the crypt module (deprecated,
    still in Python 3.11 and 3.12)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        import crypt  # noqa: PLC0415 - imported here to silence its deprecation warning

        hashed = crypt.crypt(password, crypt.mksalt(crypt.METHOD_BLOWFISH, rounds=1 << 4))
    assert hashed.startswith("$2b$"), "this libc's crypt() has no bcrypt"
    return hashed


@pytest.fixture(scope="module")
def secured_prometheus(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SecuredPrometheus]:
    cluster = cluster_info.load()
    if cluster is None:
        pytest.skip("no local cluster: the Prometheus binary is built by `make cluster-up`")
    if shutil.which("openssl") is None:
        pytest.fail("openssl is needed to make the test CA (apt-get install openssl)")
    binary = Path(cluster.raw["binaries"]["prometheus"])
    directory = tmp_path_factory.mktemp("secured-prometheus")
    ca_crt, crt, key = make_pki(directory)
    web = directory / "web.yml"
    web.write_text(
        yaml.safe_dump(
            {
                "tls_server_config": {"cert_file": str(crt), "key_file": str(key)},
                "basic_auth_users": {USERNAME: bcrypt_hash(PASSWORD)},
            }
        )
    )
    config = directory / "prometheus.yml"
    config.write_text("global: {scrape_interval: 1m}\n")
    (directory / "username").write_text(USERNAME + "\n")
    (directory / "password").write_text(PASSWORD)
    port = free_port()
    url = f"https://127.0.0.1:{port}"
    log = (directory / "prometheus.log").open("w")
    process = subprocess.Popen(
        [
            str(binary),
            f"--config.file={config}",
            f"--web.config.file={web}",
            f"--storage.tsdb.path={directory / 'data'}",
            f"--web.listen-address=127.0.0.1:{port}",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                ready = requests.get(
                    f"{url}/-/ready", verify=str(ca_crt), auth=(USERNAME, PASSWORD), timeout=2
                )
                if ready.status_code == 200:
                    break
            except requests.exceptions.ConnectionError:
                pass
            if process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(
                    f"Prometheus did not start: {(directory / 'prometheus.log').read_text()[-2000:]}"
                )
            time.sleep(0.2)
        yield SecuredPrometheus(url, ca_crt, directory / "username", directory / "password")
    finally:
        process.terminate()
        process.wait(timeout=30)
        log.close()


def signals(connection: PrometheusConnection) -> PrometheusSignals:
    return PrometheusSignals(connection, SignalLabels())


def test_ca_and_basic_auth_from_the_operator_config(
    secured_prometheus: SecuredPrometheus, tmp_path: Path
) -> None:
    """The whole chain as the chart sets it up: a config file with the files' paths, load_settings,
    the connection the operator builds from its Settings."""
    config = tmp_path / "config.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "prometheusUrl": secured_prometheus.url,
                "prometheusCaFile": str(secured_prometheus.ca_file),
                "prometheusBasicAuthUsernameFile": str(secured_prometheus.username_file),
                "prometheusBasicAuthPasswordFile": str(secured_prometheus.password_file),
                "prometheusHeaders": {"X-Scope-OrgID": "team-a"},
            }
        )
    )
    settings = load_settings({"LLAMA_OPERATOR_CONFIG": str(config)})
    prometheus = signals(PrometheusConnection.from_settings(settings))
    assert prometheus.query("vector(42)") == [({}, 42.0)]


def test_without_the_ca_verification_fails_naming_the_setting(secured_prometheus: SecuredPrometheus) -> None:
    prometheus = signals(
        PrometheusConnection(
            secured_prometheus.url,
            basic_auth_username_file=str(secured_prometheus.username_file),
            basic_auth_password_file=str(secured_prometheus.password_file),
        )
    )
    with pytest.raises(PrometheusUnreachableError) as failed:
        prometheus.query("vector(1)")
    message = str(failed.value)
    assert (
        f"TLS with {secured_prometheus.url} failed: certificate verify failed: unable to get local issuer"
        in message
    )
    assert "set prometheusCaFile to the CA bundle" in message and "prometheus.ca" in message


def test_insecure_skip_verify_is_an_explicit_opt_out(secured_prometheus: SecuredPrometheus) -> None:
    prometheus = signals(
        PrometheusConnection(
            secured_prometheus.url,
            insecure_skip_verify=True,
            basic_auth_username_file=str(secured_prometheus.username_file),
            basic_auth_password_file=str(secured_prometheus.password_file),
        )
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # urllib3's InsecureRequestWarning: that is the point here
        assert prometheus.query("vector(7)") == [({}, 7.0)]


def test_a_wrong_password_is_a_clear_401(secured_prometheus: SecuredPrometheus, tmp_path: Path) -> None:
    wrong = tmp_path / "password"
    wrong.write_text("not the password")
    prometheus = signals(
        PrometheusConnection(
            secured_prometheus.url,
            ca_file=str(secured_prometheus.ca_file),
            basic_auth_username_file=str(secured_prometheus.username_file),
            basic_auth_password_file=str(wrong),
        )
    )
    with pytest.raises(PrometheusUnreachableError) as refused:
        prometheus.query("vector(1)")
    message = str(refused.value)
    assert "answered 401 Unauthorized" in message
    assert "prometheusBasicAuthUsernameFile/PasswordFile" in message and "prometheus.basicAuth" in message
    assert "not the password" not in message and PASSWORD not in message

    wrong.write_text(PASSWORD)  # the Secret updated: read again, no restart
    assert prometheus.query("vector(1)") == [({}, 1.0)]


def test_the_chart_mounts_the_secrets_and_configures_only_their_paths() -> None:
    cluster = cluster_info.load()
    if cluster is None:
        pytest.skip("no local cluster: helm comes with it")
    done = subprocess.run(
        [
            str(cluster.helm_path), "template", "x", str(repo_root() / "charts" / "llama-operator"),
            "--set", "config.prometheusUrl=https://prometheus.monitoring.svc:9090",
            "--set", "prometheus.ca.configMap=prometheus-ca",
            "--set", "prometheus.basicAuth.secretName=prometheus-basic-auth",
            "--set", "config.prometheusHeaders.X-Scope-OrgID=team-a",
        ],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    docs = {
        d["kind"]: d
        for d in yaml.safe_load_all(done.stdout)
        if d and (d["kind"] == "Deployment" or "config.yaml" in d.get("data", {}))
    }
    config = yaml.safe_load(docs["ConfigMap"]["data"]["config.yaml"])
    pod = docs["Deployment"]["spec"]["template"]["spec"]
    mounts = {m["name"]: m["mountPath"] for m in pod["containers"][0]["volumeMounts"]}
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert config["prometheusCaFile"] == mounts["prometheus-ca"] + "/ca.crt"
    assert config["prometheusBasicAuthUsernameFile"] == mounts["prometheus-basic-auth"] + "/username"
    assert config["prometheusBasicAuthPasswordFile"] == mounts["prometheus-basic-auth"] + "/password"
    assert config["prometheusHeaders"] == {"X-Scope-OrgID": "team-a"}
    assert volumes["prometheus-ca"]["configMap"]["name"] == "prometheus-ca"
    assert volumes["prometheus-basic-auth"]["secret"]["secretName"] == "prometheus-basic-auth"

    refused = subprocess.run(
        [
            str(cluster.helm_path), "template", "x", str(repo_root() / "charts" / "llama-operator"),
            "--set", "config.prometheusHeaders.Authorization=Bearer x",
        ],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert refused.returncode != 0 and "Authorization" in refused.stderr
