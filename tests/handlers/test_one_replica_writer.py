"""One writer of an owned Deployment's spec.replicas: the autoscaler. The reconciler's server-side apply
leaves replicas out for an autoscaled service, and nothing else in the operator sets them; a hand scale
past the bounds wakes the autoscaler instead (tests/reconcile/test_drift_repair.py)."""

from __future__ import annotations

import ast
from pathlib import Path

import llama_operator
from llama_operator.api.settings import Settings
from llama_operator.desired.objects import build_desired_state
from llama_operator.infra import execute
from llama_operator.reconcile.outcome import plan_llamaservice

WRITER = "set_deployment_replicas"


def callers(name: str) -> set[str]:
    """Modules of the runtime that call `name` (as a bare name or an attribute)."""
    root = Path(llama_operator.__path__[0])
    found: set[str] = set()
    for path in root.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Call):
                called = (
                    node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
                )
                if called == name:
                    found.add(path.relative_to(root).as_posix())
    return found


def test_only_the_autoscaler_writes_replicas() -> None:
    assert hasattr(execute, WRITER)  # the scan looks for the function that exists
    assert callers(WRITER) == {"handlers/autoscaler.py"}


def test_the_reconcilers_deployment_leaves_replicas_to_the_autoscaler() -> None:
    manifest = {
        "apiVersion": "serving.llama-operator.dev/v1alpha1",
        "kind": "LlamaService",
        "metadata": {"name": "chat", "namespace": "team-a", "uid": "0000-1"},
        "spec": {
            "model": {"name": "meta-llama/Llama-3.2-1B-Instruct"},
            "accelerator": {"type": "t4"},
            "replicas": 5,
            "autoscaling": {"minReplicas": 1, "maxReplicas": 3},
        },
    }
    service, plan = plan_llamaservice(manifest, Settings(), None)
    desired = build_desired_state(service, plan, Settings(), pod_monitor=False)
    deployments = [o for o in desired.objects if o["kind"] == "Deployment"]
    assert len(deployments) == 1
    assert "replicas" not in deployments[0]["spec"]
