"""An invalid operator configuration stops the operator with one line naming the field, not a pydantic dump."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from llama_operator.infra.config import ConfigError, load_settings


@pytest.mark.parametrize(
    ("config", "field"),
    [
        ("prometheusUrl: notaurl\n", "prometheusUrl"),
        ("prometheusUrl: ftp://prometheus:9090\n", "prometheusUrl"),
        ("migStrategy: bogus\nresyncSeconds: -1\n", "migStrategy"),
        ("podLabels: {app.kubernetes.io/name: x}\n", "podLabels"),
    ],
)
def test_an_invalid_configuration_is_one_line_naming_the_field(
    tmp_path: Path, config: str, field: str
) -> None:
    path = tmp_path / "config.yaml"
    path.write_text(config)
    with pytest.raises(ConfigError) as err:
        load_settings({"LLAMA_OPERATOR_CONFIG": str(path)})
    message = str(err.value)
    assert "\n" not in message
    assert message.startswith(f"invalid operator configuration ({path}): {field}: ")
    assert (
        "pydantic" not in message
        and "input_value" not in message
        and "For further information" not in message
    )


def test_every_error_is_in_the_line(tmp_path: Path) -> None:
    path = tmp_path / "config.yaml"
    path.write_text("migStrategy: bogus\nresyncSeconds: -1\n")
    with pytest.raises(ConfigError, match=r"migStrategy: .*; resyncSeconds: "):
        load_settings({"LLAMA_OPERATOR_CONFIG": str(path)})


def test_a_url_is_an_http_url() -> None:
    settings = load_settings({"LLAMA_OPERATOR_PROMETHEUS_URL": "https://mimir.example.com/prometheus"})
    assert settings.prometheus_url == "https://mimir.example.com/prometheus"
    with pytest.raises(ConfigError, match="prometheusUrl: 'notaurl' is not an http:// or https:// URL"):
        load_settings({"LLAMA_OPERATOR_PROMETHEUS_URL": "notaurl"})


def test_a_file_that_is_not_yaml_or_not_there_is_one_line(tmp_path: Path) -> None:
    broken = tmp_path / "config.yaml"
    broken.write_text("prometheusUrl: [unclosed\n")
    with pytest.raises(ConfigError, match=rf"^{broken}: not YAML at line \d+: ") as err:
        load_settings({"LLAMA_OPERATOR_CONFIG": str(broken)})
    assert "\n" not in str(err.value)
    missing = tmp_path / "absent.yaml"
    with pytest.raises(ConfigError, match=rf"^{missing}: cannot read the operator's configuration"):
        load_settings({"LLAMA_OPERATOR_CONFIG": str(missing)})


KUBECONFIG = """apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://127.0.0.1:1"}}]
users: [{name: u, user: {token: x}}]
contexts: [{name: x, context: {cluster: c, user: u, namespace: ops}}]
current-context: x
"""


def test_run_stops_with_the_one_line_and_exit_1(tmp_path: Path) -> None:
    """As the pod's log shows it: `llama-operator run` with the chart's config file, one line, no dump."""
    config = tmp_path / "config.yaml"
    config.write_text("prometheusUrl: notaurl\nmigStrategy: bogus\n")
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(KUBECONFIG)
    env = {**os.environ, "KUBECONFIG": str(kubeconfig), "LLAMA_OPERATOR_CONFIG": str(config)}
    done = subprocess.run(
        [sys.executable, "-m", "llama_operator", "run", "--standalone"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 1, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert lines[0].lower().startswith(f"error: invalid operator configuration ({config}): migstrategy: ")
    assert "prometheusUrl: 'notaurl' is not an http:// or https:// URL" in lines[0]
