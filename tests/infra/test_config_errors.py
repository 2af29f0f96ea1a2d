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


# Every interval the operator waits on: under a second, a loop runs back to back (the autoscaler's
# Prometheus queries, the resync, the status writes, the Lease renewals).
INTERVALS = (
    "autoscaleIntervalSeconds",
    "resyncSeconds",
    "statusRefreshSeconds",
    "leaderRenewSeconds",
    "signalWindowSeconds",
)


@pytest.mark.parametrize("field", INTERVALS)
@pytest.mark.parametrize("value", [-5, 0, 0.5])
def test_an_interval_under_a_second_is_refused(tmp_path: Path, field: str, value: float) -> None:
    path = tmp_path / "config.yaml"
    path.write_text(f"{field}: {value}\nburstWindowSeconds: 0\n")
    with pytest.raises(ConfigError, match=rf"{field}: .*1"):
        load_settings({"LLAMA_OPERATOR_CONFIG": str(path)})


@pytest.mark.parametrize("field", ["burstWindowSeconds", "engineReplanIntervalSeconds"])
def test_an_interval_that_zero_turns_off_is_zero_or_at_least_a_second(tmp_path: Path, field: str) -> None:
    path = tmp_path / "config.yaml"
    for value in (-1, 0.5):
        path.write_text(f"{field}: {value}\n")
        with pytest.raises(ConfigError, match=rf"{field}: "):
            load_settings({"LLAMA_OPERATOR_CONFIG": str(path)})
    for value in (0, 1):
        path.write_text(f"{field}: {value}\n")
        load_settings({"LLAMA_OPERATOR_CONFIG": str(path)})


H20 = (
    "{memoryMiB: 97871, bandwidthGBps: 4000, fp16Tflops: 148, computeCapability: '9.0', pricePerHour: 2.0, "
    "productLabels: [NVIDIA-H20]"
)


@pytest.mark.parametrize(
    ("entry", "says"),
    [
        ("{memoryMiB: 97871}", "a new accelerator needs bandwidthGBps"),
        (H20 + ", productLabels: []}", "productLabels"),
        (H20 + ", migProfiles: [{name: 1g.12gb, computeSlices: 1, memorySlices: 1}]}", "memoryMiB"),
        (
            H20 + ", migProfiles: [{name: 1g.200gb, computeSlices: 1, memorySlices: 1, memoryMiB: 200000}]}",
            "more memory than the GPU",
        ),
        (
            H20 + ", migProfiles: [{name: 7g.12gb, computeSlices: 1, memorySlices: 1, memoryMiB: 12000}]}",
            "7g.12gb has 1 compute slices",
        ),
        (
            H20 + ", migProfiles: [{name: 1g.12gb, computeSlices: 1, memorySlices: 1, memoryMiB: 12000}, "
            "{name: 1g.12gb, computeSlices: 1, memorySlices: 1, memoryMiB: 12000}]}",
            "1g.12gb twice",
        ),
        ("null", "h20"),
    ],
)
def test_an_incomplete_or_inconsistent_gpu_is_one_line_naming_it(
    tmp_path: Path, entry: str, says: str
) -> None:
    path = tmp_path / "config.yaml"
    path.write_text(f"accelerators:\n  h20: {entry}\n")
    with pytest.raises(ConfigError) as err:
        load_settings({"LLAMA_OPERATOR_CONFIG": str(path)})
    assert "accelerators" in str(err.value) and says in str(err.value), str(err.value)
    assert "\n" not in str(err.value)


def test_a_complete_gpu_loads(tmp_path: Path) -> None:
    path = tmp_path / "config.yaml"
    path.write_text(
        f"accelerators:\n  h20: {H20}, migProfiles: [{{name: 1g.12gb, computeSlices: 1, memorySlices: 1, "
        "memoryMiB: 11904}]}\n  t4: {pricePerHour: 0.3}\n"
    )
    settings = load_settings({"LLAMA_OPERATOR_CONFIG": str(path)})
    assert settings.accelerators["h20"].mig_profiles and settings.accelerators["t4"].price_per_hour == 0.3
