"""The command line as users and checks call it: a real subprocess of `python -m llama_operator`."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import yaml

from llama_operator.api.crd import CRD_FILE

PLAN_KEYS = {
    "accelerator",
    "resources",
    "nodeSelector",
    "tolerations",
    "vllmArgs",
    "maxModelLen",
    "maxNumSeqs",
    "kvCacheTokens",
}


def cli(*args: str, stdin: str | None = None, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "llama_operator", *args],
        capture_output=True,
        text=True,
        input=stdin,
        cwd=cwd,
        timeout=120,
        check=False,
    )


def test_crd_prints_the_committed_file(repo: Path) -> None:
    done = cli("crd", cwd=repo)
    assert done.returncode == 0
    assert done.stdout == (repo / CRD_FILE).read_text()


def test_plan_json_has_the_documented_keys(repo: Path) -> None:
    done = cli("plan", "-f", "examples/t4-chat.yaml", "-o", "json", cwd=repo)
    assert done.returncode == 0, done.stderr
    plan = json.loads(done.stdout)
    assert set(plan) >= PLAN_KEYS
    assert plan["accelerator"] == "t4"
    assert plan["nodeSelector"] == {"nvidia.com/gpu.product": "Tesla-T4"}
    assert "--dtype" in plan["vllmArgs"]
    assert plan["vllmArgs"][plan["vllmArgs"].index("--dtype") + 1] == "half"


def test_plan_with_node_inventory_picks_what_is_present(repo: Path) -> None:
    done = cli("plan", "-f", "examples/auto.yaml", "--nodes", "e2e/nodes", "-o", "yaml", cwd=repo)
    assert done.returncode == 0, done.stderr
    plan = yaml.safe_load(done.stdout)
    assert plan["nodeSelector"]["nvidia.com/gpu.product"] in {
        "Tesla-T4",
        "NVIDIA-A10G",
        "A100-SXM4-80GB",
        "NVIDIA-H100-80GB-HBM3-MIG-1g.10gb",
    }


def test_plan_that_cannot_work_exits_1_with_the_reason_on_stderr(repo: Path) -> None:
    manifest = yaml.safe_dump(
        {
            "apiVersion": "serving.llama-operator.dev/v1alpha1",
            "kind": "LlamaService",
            "metadata": {"name": "big"},
            "spec": {"model": {"name": "meta-llama/Llama-3.1-70B-Instruct"}, "accelerator": {"type": "t4"}},
        }
    )
    done = cli("plan", "-f", "-", stdin=manifest, cwd=repo)
    assert done.returncode == 1
    assert done.stdout == ""
    assert "error:" in done.stderr
    assert "GiB" in done.stderr  # the memory it needs and what the accelerator has


def test_invalid_manifest_names_the_field(repo: Path) -> None:
    manifest = yaml.safe_dump(
        {
            "apiVersion": "serving.llama-operator.dev/v1alpha1",
            "kind": "LlamaService",
            "metadata": {"name": "x"},
            "spec": {"model": {"name": "m"}, "autoscaling": {"minReplicas": 4, "maxReplicas": 2}},
        }
    )
    done = cli("plan", "-f", "-", stdin=manifest, cwd=repo)
    assert done.returncode == 1
    assert "spec.autoscaling" in done.stderr


def test_render_prints_multi_document_yaml(repo: Path) -> None:
    done = cli("render", "-f", "examples/a10g-chat.yaml", cwd=repo)
    assert done.returncode == 0, done.stderr
    kinds = [d["kind"] for d in yaml.safe_load_all(done.stdout)]
    assert kinds == ["Service", "PodDisruptionBudget", "Deployment"]
