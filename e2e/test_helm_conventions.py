"""The chart behaves as platform teams expect of a chart: usable as a subchart (`global`), renamable,
highly available (a PDB with replicas), extensible (extra env, volumes, topology spread), with defaults for
the vLLM pods' scheduling, one label for every monitor, URLs checked at install time, and a kubeVersion.

Rendered with `helm template` (no cluster needed): the chart's schema judges the values as `helm install`
would."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from support import repo_root

pytestmark = pytest.mark.beside_operators

CHART = repo_root() / "charts" / "llama-operator"


def template(helm: Path, *args: str, release: str = "llama-operator") -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(helm), "template", release, str(CHART), "--namespace", "llama-operator", *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def render(helm: Path, *args: str, release: str = "llama-operator") -> list[dict[str, Any]]:
    proc = template(helm, *args, release=release)
    assert proc.returncode == 0, proc.stderr
    return [d for d in yaml.safe_load_all(proc.stdout) if d]


def find(docs: list[dict[str, Any]], kind: str, name: str | None = None) -> list[dict[str, Any]]:
    return [d for d in docs if d["kind"] == kind and (name is None or d["metadata"]["name"] == name)]


def operator_deployment(docs: list[dict[str, Any]]) -> dict[str, Any]:
    (found,) = [d for d in find(docs, "Deployment") if "activator" not in d["metadata"]["name"]]
    return found


def operator_config(docs: list[dict[str, Any]]) -> dict[str, Any]:
    (config_map,) = [c for c in find(docs, "ConfigMap") if "config.yaml" in c["data"]]
    loaded: dict[str, Any] = yaml.safe_load(config_map["data"]["config.yaml"])
    return loaded


def test_usable_as_a_subchart_with_global_values(helm: Path) -> None:
    docs = render(helm, "--set", "global.imageRegistry=registry.example.com", "--set", "global.foo.bar=1")
    assert operator_deployment(docs)


def test_name_overrides_rename_every_object(helm: Path) -> None:
    docs = render(helm, "--set", "fullnameOverride=llm-ops")
    names = {d["metadata"]["name"] for d in docs if d["kind"] in ("Deployment", "ConfigMap", "Service")}
    assert names == {"llm-ops", "llm-ops-metrics", "llm-ops-dashboard"}
    assert operator_deployment(docs)["spec"]["template"]["spec"]["serviceAccountName"] == "llm-ops"
    docs = render(helm, "--set", "nameOverride=llm", release="prod")
    assert operator_deployment(docs)["metadata"]["name"] == "prod-llm"
    assert operator_deployment(docs)["metadata"]["labels"]["app.kubernetes.io/name"] == "llm"


def test_a_pdb_keeps_one_operator_when_it_has_replicas(helm: Path) -> None:
    assert not find(render(helm), "PodDisruptionBudget")
    docs = render(helm, "--set", "replicaCount=2")
    (pdb,) = [p for p in find(docs, "PodDisruptionBudget") if "activator" not in p["metadata"]["name"]]
    selector = operator_deployment(docs)["spec"]["selector"]["matchLabels"]
    assert pdb["spec"]["selector"]["matchLabels"] == selector
    assert pdb["spec"]["minAvailable"] == 1


def test_a_pdb_that_would_block_every_drain_is_refused(helm: Path) -> None:
    proc = template(helm, "--set", "replicaCount=2", "--set", "podDisruptionBudget.minAvailable=2")
    assert (
        proc.returncode != 0
        and "podDisruptionBudget.minAvailable (2) must be below replicaCount (2)" in proc.stderr
    )
    assert find(
        render(helm, "--set", "replicaCount=3", "--set", "podDisruptionBudget.minAvailable=2"),
        "PodDisruptionBudget",
    )


def test_topology_spread_extra_env_and_volumes_reach_the_pod(helm: Path, tmp_path: Path) -> None:
    values = tmp_path / "values.yaml"
    values.write_text(
        yaml.safe_dump(
            {
                "topologySpreadConstraints": [
                    {
                        "maxSkew": 1,
                        "topologyKey": "topology.kubernetes.io/zone",
                        "whenUnsatisfiable": "DoNotSchedule",
                    }
                ],
                "extraEnv": [{"name": "HTTPS_PROXY", "value": "http://proxy:3128"}],
                "extraVolumes": [{"name": "certs", "configMap": {"name": "corp-ca"}}],
                "extraVolumeMounts": [{"name": "certs", "mountPath": "/etc/corp-ca", "readOnly": True}],
            }
        )
    )
    pod = operator_deployment(render(helm, "-f", str(values)))["spec"]["template"]["spec"]
    (spread,) = pod["topologySpreadConstraints"]
    assert spread["topologyKey"] == "topology.kubernetes.io/zone"
    # The chart fills in the selector that spreads the operator's own pods.
    assert spread["labelSelector"]["matchLabels"]["app.kubernetes.io/name"] == "llama-operator"
    (container,) = pod["containers"]
    assert {"name": "HTTPS_PROXY", "value": "http://proxy:3128"} in container["env"]
    assert {"name": "certs", "configMap": {"name": "corp-ca"}} in pod["volumes"]
    assert {"name": "certs", "mountPath": "/etc/corp-ca", "readOnly": True} in container["volumeMounts"]


def test_vllm_pod_scheduling_defaults_reach_the_operators_config(helm: Path, tmp_path: Path) -> None:
    toleration = {"key": "dedicated", "operator": "Equal", "value": "llm", "effect": "NoSchedule"}
    values = tmp_path / "values.yaml"
    values.write_text(
        yaml.safe_dump(
            {
                "config": {
                    "podTolerations": [toleration],
                    "podNodeSelector": {"pool": "inference"},
                    "podAffinity": {
                        "nodeAffinity": {
                            "preferredDuringSchedulingIgnoredDuringExecution": [
                                {
                                    "weight": 1,
                                    "preference": {
                                        "matchExpressions": [
                                            {"key": "spot", "operator": "In", "values": ["false"]}
                                        ]
                                    },
                                }
                            ]
                        }
                    },
                }
            }
        )
    )
    config = operator_config(render(helm, "-f", str(values)))
    assert config["podTolerations"] == [toleration]
    assert config["podNodeSelector"] == {"pool": "inference"}
    assert config["podAffinity"]["nodeAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"]


def test_one_monitoring_label_reaches_every_monitor_and_rule(helm: Path) -> None:
    docs = render(
        helm,
        "--set",
        "monitoring.labels.release=kps",
        "--set",
        "metrics.serviceMonitor.enabled=true",
        "--set",
        "prometheusRule.enabled=true",
        "--set",
        "activator.enabled=true",
    )
    monitors = [d for d in docs if d["kind"] in ("ServiceMonitor", "PodMonitor", "PrometheusRule")]
    kinds = {d["kind"] for d in monitors}
    assert {"ServiceMonitor", "PrometheusRule"} <= kinds
    # The activator is scraped too.
    assert any("activator" in d["metadata"]["name"] for d in monitors if d["kind"] != "PrometheusRule")
    for d in monitors:
        assert d["metadata"]["labels"].get("release") == "kps", d["metadata"]["name"]
    # ... and the PodMonitors the operator makes for each LlamaService.
    assert operator_config(docs)["podMonitorLabels"] == {"release": "kps"}


@pytest.mark.parametrize(
    ("setting", "field"),
    [
        ("config.prometheusUrl=notaurl", "prometheusUrl"),
        ("config.prometheusUrl=ftp://prometheus:9090", "prometheusUrl"),
        ("prometheusRule.runbookUrl=docs/runbook", "runbookUrl"),
    ],
)
def test_a_url_that_is_not_one_fails_at_install_time(helm: Path, setting: str, field: str) -> None:
    proc = template(helm, "--set", setting)
    assert proc.returncode != 0
    assert field in proc.stderr


def test_urls_that_are_urls_pass(helm: Path) -> None:
    render(
        helm,
        "--set",
        "config.prometheusUrl=https://mimir.example.com/prometheus",
        "--set",
        "prometheusRule.runbookUrl=https://wiki.example.com/llm/runbook",
    )


def test_the_chart_states_the_kubernetes_it_needs(helm: Path) -> None:
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    assert chart["kubeVersion"] == ">=1.30.0-0"  # the vLLM pods' preStop sleep hook is 1.30's
    proc = template(helm, "--kube-version", "1.29.0")
    assert proc.returncode != 0 and "kubeVersion" in proc.stderr
    render(helm, "--kube-version", "1.30.0")


def test_watch_namespaces_as_the_docs_set_it(helm: Path) -> None:
    docs = render(helm, "--set", "watchNamespaces={team-a,team-b}")
    args = operator_deployment(docs)["spec"]["template"]["spec"]["containers"][0]["args"]
    assert "--namespace=team-a" in args and "--namespace=team-b" in args


# The GPU docs/install.md adds through values (its example values file).
H20: dict[str, Any] = yaml.safe_load((repo_root() / "docs" / "examples" / "h20-values.yaml").read_text())[
    "config"
]["accelerators"]["h20"]


def test_a_platform_adds_a_gpu_through_values(helm: Path, tmp_path: Path) -> None:
    h20 = H20
    values = tmp_path / "values.yaml"
    values.write_text(yaml.safe_dump({"config": {"accelerators": {"h20": h20, "t4": {"pricePerHour": 0.3}}}}))
    config = operator_config(render(helm, "-f", str(values)))
    assert config["accelerators"]["h20"] == h20
    # What the chart passes is what the operator loads (api/settings.py).
    from llama_operator.api.settings import Settings  # noqa: PLC0415

    assert Settings.model_validate(config).accelerators["t4"].price_per_hour == 0.3
    values.write_text(yaml.safe_dump({"config": {"accelerators": {"h20": {**h20, "memoryMiB": "lots"}}}}))
    proc = template(helm, "-f", str(values))
    assert proc.returncode != 0 and "memoryMiB" in proc.stderr


def test_common_labels_args_and_sidecars(helm: Path, tmp_path: Path) -> None:
    values = tmp_path / "values.yaml"
    values.write_text(
        yaml.safe_dump(
            {
                "commonLabels": {"cost-center": "ml-platform"},
                "extraArgs": ["--log-prefix"],
                "initContainers": [{"name": "wait", "image": "busybox", "command": ["true"]}],
                "extraContainers": [{"name": "shipper", "image": "fluent-bit"}],
            }
        )
    )
    docs = render(helm, "-f", str(values))
    for d in docs:
        if d["kind"] != "CustomResourceDefinition":
            assert d["metadata"]["labels"]["cost-center"] == "ml-platform", (d["kind"], d["metadata"]["name"])
    pod = operator_deployment(docs)["spec"]["template"]["spec"]
    assert pod["containers"][0]["args"][-1] == "--log-prefix"
    assert [c["name"] for c in pod["initContainers"]] == ["wait"]
    assert [c["name"] for c in pod["containers"]] == ["operator", "shipper"]
    # The selector labels stay the chart's: a common label cannot take them over.
    assert template(helm, "--set", "commonLabels.app\\.kubernetes\\.io/name=x").returncode != 0


def test_the_leader_lease_role_is_where_the_lease_is(helm: Path) -> None:
    docs = render(helm, "--set", "config.leaderElectionNamespace=kube-system")
    lease_rules = [
        (d["kind"], d["metadata"]["namespace"])
        for d in find(docs, "Role") + find(docs, "RoleBinding")
        if any("leases" in r["resources"] and "create" in r["verbs"] for r in d.get("rules", []))
        or d["metadata"]["name"].endswith("-leader-election")
    ]
    assert ("Role", "kube-system") in lease_rules and ("RoleBinding", "kube-system") in lease_rules
    (lease_role,) = [r for r in find(docs, "Role") if r["metadata"]["namespace"] == "kube-system"]
    assert [r["resources"] for r in lease_role["rules"]] == [["leases"]]  # nothing else in kube-system
    # The Warning Event on the operator's own Pod (election refused) stays in the release namespace.
    (events_role,) = [
        r
        for r in find(docs, "Role")
        if r["metadata"]["namespace"] == "llama-operator"
        and r["metadata"]["name"].endswith("-leader-election")
    ]
    assert [r["resources"] for r in events_role["rules"]] == [["events"]]
    # Unset, one Role in the release namespace holds both.
    (default_role,) = [
        r for r in find(render(helm), "Role") if r["metadata"]["name"].endswith("-leader-election")
    ]
    assert default_role["metadata"]["namespace"] == "llama-operator"
    assert [r["resources"] for r in default_role["rules"]] == [["leases"], ["events"]]


def parent_chart(tmp_path: Path, dependencies: list[dict[str, Any]], values: dict[str, Any]) -> Path:
    """A parent chart holding this chart under charts/ (as `helm dependency build` leaves it)."""
    parent = tmp_path / "platform"
    shutil.copytree(CHART, parent / "charts" / "llama-operator")
    chart = {"apiVersion": "v2", "name": "platform", "version": "1.0.0", "dependencies": dependencies}
    (parent / "Chart.yaml").write_text(yaml.safe_dump(chart))
    (parent / "values.yaml").write_text(yaml.safe_dump(values))
    return parent


def render_parent(helm: Path, parent: Path) -> list[dict[str, Any]]:
    proc = subprocess.run(
        [str(helm), "template", "platform", str(parent), "--namespace", "platform"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    return [d for d in yaml.safe_load_all(proc.stdout) if d]


def test_a_parent_chart_switches_it_on_and_off_with_its_condition(helm: Path, tmp_path: Path) -> None:
    dependency = {"name": "llama-operator", "version": "0.1.0", "condition": "llama-operator.enabled"}
    parent = parent_chart(tmp_path, [dependency], {"llama-operator": {"enabled": True}})
    assert operator_deployment(render_parent(helm, parent))
    (parent / "values.yaml").write_text(yaml.safe_dump({"llama-operator": {"enabled": False}}))
    assert not render_parent(helm, parent)


def test_two_aliased_copies_have_objects_of_their_own(helm: Path, tmp_path: Path) -> None:
    dependencies = [
        {"name": "llama-operator", "version": "0.1.0", "alias": alias} for alias in ("llm-a", "llm-b")
    ]
    # One copy installs the cluster's one CRD; both watch their own namespaces.
    # Every optional object on, in both copies: the cluster-scoped ones (policy, roles) too.
    optional = {
        "activator": {"enabled": True, "networkPolicy": {"enabled": True}},
        "admissionPolicy": {"enabled": True},
        "prometheusRule": {"enabled": True},
        "metrics": {"serviceMonitor": {"enabled": True}},
        "replicaCount": 2,
    }
    values = {
        "llm-a": {**optional, "watchNamespaces": ["team-a"]},
        "llm-b": {**optional, "watchNamespaces": ["team-b"], "crds": {"install": False}},
    }
    docs = render_parent(helm, parent_chart(tmp_path, dependencies, values))
    keys = [(d["kind"], d["metadata"].get("namespace"), d["metadata"]["name"]) for d in docs]
    assert len(keys) == len(set(keys)), sorted(k for k in keys if keys.count(k) > 1)
    deployments = [d for d in find(docs, "Deployment") if "activator" not in d["metadata"]["name"]]
    assert sorted(d["metadata"]["name"] for d in deployments) == ["platform-llm-a", "platform-llm-b"]
    # Each copy's Deployments (operator and router) select their own pods only.
    selectors = {
        tuple(sorted(d["spec"]["selector"]["matchLabels"].items())) for d in find(docs, "Deployment")
    }
    assert len(selectors) == len(find(docs, "Deployment")) == 4


def test_global_image_registry_and_pull_secrets(helm: Path) -> None:
    docs = render(
        helm,
        "--set",
        "global.imageRegistry=mirror.example.com",
        "--set",
        "global.imagePullSecrets[0]=mirror-cred",
        "--set",
        "global.imagePullSecrets[1].name=other-cred",
        "--set",
        "imagePullSecrets[0].name=own-cred",
        "--set",
        "activator.enabled=true",
    )
    for deployment in find(docs, "Deployment"):
        pod = deployment["spec"]["template"]["spec"]
        assert pod["containers"][0]["image"] == "mirror.example.com/llama-operator/llama-operator:0.1.0"
        assert pod["imagePullSecrets"] == [
            {"name": "own-cred"},
            {"name": "mirror-cred"},
            {"name": "other-cred"},
        ]
    # A repository with no registry of its own gets the global one in front.
    docs = render(
        helm, "--set", "global.imageRegistry=mirror.example.com", "--set", "image.repository=team/op"
    )
    assert operator_deployment(docs)["spec"]["template"]["spec"]["containers"][0]["image"] == (
        "mirror.example.com/team/op:0.1.0"
    )


@pytest.mark.parametrize(
    ("setting", "value"),
    [
        ("autoscaleIntervalSeconds", -5),
        ("autoscaleIntervalSeconds", 0),
        ("autoscaleIntervalSeconds", 0.5),
        ("resyncSeconds", 0),
        ("statusRefreshSeconds", 0.1),
        ("leaderRenewSeconds", 0),
        ("signalWindowSeconds", 0.5),
        ("burstWindowSeconds", 0.2),
        ("engineReplanIntervalSeconds", 0.5),
    ],
)
def test_an_interval_under_a_second_fails_at_install_time(
    helm: Path, tmp_path: Path, setting: str, value: float
) -> None:
    # A values file: `--set` passes 0.5 as a string, which the schema refuses for its type alone.
    values = tmp_path / "values.yaml"
    values.write_text(yaml.safe_dump({"config": {setting: value}}))
    proc = template(helm, "-f", str(values))
    assert proc.returncode != 0 and f"/config/{setting}" in proc.stderr, proc.stderr
    assert "got string" not in proc.stderr


def test_intervals_of_a_second_and_the_documented_zeros_pass(helm: Path) -> None:
    render(
        helm,
        "--set",
        "config.autoscaleIntervalSeconds=1",
        "--set",
        "config.burstWindowSeconds=0",
        "--set",
        "config.engineReplanIntervalSeconds=0",
    )


def test_an_incomplete_gpu_fails_at_install_time(helm: Path, tmp_path: Path) -> None:
    values = tmp_path / "values.yaml"
    for accelerators, field in (
        ({"h20": {"memoryMiB": 97871, "productLabels": ["NVIDIA-H20"]}}, "bandwidthGBps"),
        ({"h20": {**H20, "productLabels": []}}, "productLabels"),
    ):
        values.write_text(yaml.safe_dump({"config": {"accelerators": accelerators}}))
        proc = template(helm, "-f", str(values))
        assert proc.returncode != 0 and field in proc.stderr, (accelerators, proc.stderr)
    # An override of a built-in GPU may give one field.
    values.write_text(yaml.safe_dump({"config": {"accelerators": {"t4": {"pricePerHour": 0.3}}}}))
    render(helm, "-f", str(values))
