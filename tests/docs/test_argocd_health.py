"""docs/install.md's Argo CD health check for LlamaService, run by a Lua 5.4 interpreter (Debian's lua5.4,
installed by the tests' set-up: e2e/run-tests.sh) as Argo CD runs it: `obj` is the object, the script returns
{status, message}. The statuses it judges are the operator's own, from its pure functions (reconcile,
rollout_status, report_execution), so a change of the status the check reads fails here."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from llama_operator.api.settings import Settings
from llama_operator.reconcile.execution import ExecutionReport, ObjectRef, report_execution
from llama_operator.reconcile.outcome import reconcile
from llama_operator.reconcile.rollout import rollout_status
from tests.docs.markdown import code_blocks
from tests.reconcile.test_outcome import UNSCHEDULABLE_POD, deployment

DOC = Path(__file__).resolve().parents[2] / "docs" / "install.md"
NOW = datetime(2026, 12, 8, 12, 0, tzinfo=UTC)
LUA_NAMES = ("lua5.4", "lua")


@pytest.fixture(scope="module")
def lua() -> str:
    found = next((path for name in LUA_NAMES if (path := shutil.which(name))), None)
    if found is None:
        message = "no Lua interpreter (apt-get install lua5.4; e2e/run-tests.sh installs it)"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    return found


@pytest.fixture(scope="module")
def health_check() -> str:
    (block,) = [b for b in code_blocks(DOC.read_text()) if b.language == "lua"]
    return block.text


def as_lua(value: Any) -> str:
    """A JSON value as a Lua constructor (null: nil, as Argo CD's object conversion leaves it out)."""
    if value is None:
        return "nil"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value)  # JSON's string escapes are Lua's for what statuses hold
    if isinstance(value, list):
        return "{" + ", ".join(as_lua(v) for v in value) + "}"
    return "{" + ", ".join(f"[{json.dumps(k)}] = {as_lua(v)}" for k, v in value.items()) + "}"


def judge(lua: str, script: str, obj: dict[str, Any]) -> tuple[str, str]:
    program = f"obj = {as_lua(obj)}\nlocal function check()\n{script}\nend\nlocal hs = check()\n"
    program += 'io.write(hs.status, "\\n", hs.message)\n'
    done = subprocess.run([lua, "-"], input=program, capture_output=True, text=True, timeout=30, check=False)
    assert done.returncode == 0, done.stderr
    status, message = done.stdout.split("\n", 1)
    return status, message


def llamaservice(generation: int = 3, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "serving.llama-operator.dev/v1alpha1",
        "kind": "LlamaService",
        "metadata": {"name": "chat", "namespace": "team-a", "uid": "u-1", "generation": generation},
        "spec": {
            "model": {"name": "meta-llama/Llama-3.2-1B-Instruct"},
            "accelerator": {"type": "t4"},
            **spec,
        },
    }


def operated(body: dict[str, Any], dep: dict[str, Any] | None, pods: list[dict[str, Any]]) -> dict[str, Any]:
    """The LlamaService with the status the operator writes: a reconcile, then the rollout it sees."""
    status = reconcile(body, Settings(), inventory=None, pod_monitor=False, now=NOW).status_patch
    if status.get("phase") != "Failed":
        status = {**status, **rollout_status(status, dep, pods, generation=3, now=NOW)}
    return {**body, "status": status}


def test_no_status_yet_is_progressing(lua: str, health_check: str) -> None:
    assert judge(lua, health_check, llamaservice())[0] == "Progressing"


def test_a_spec_the_operator_has_not_acted_on_is_progressing(lua: str, health_check: str) -> None:
    served = operated(llamaservice(), deployment(1, 1, 1), [])
    changed = {**served, "metadata": {**served["metadata"], "generation": 4}}
    assert judge(lua, health_check, changed) == (
        "Progressing",
        "Waiting for the operator to act on generation 4",
    )


@pytest.mark.parametrize(
    ("dep", "pods", "health", "says"),
    [
        (None, [], "Progressing", "DeploymentMissing"),
        (deployment(2, 1, 1), [], "Progressing", "RollingOut: 1/2 replicas ready"),
        (deployment(1, 1, 1), [], "Healthy", "ReplicasReady: 1/1 replicas ready"),
        (
            deployment(1, 0, 1),
            [UNSCHEDULABLE_POD],
            "Degraded",
            "Unschedulable: pods cannot be placed: 0/9 nodes",
        ),
        (deployment(0, 0, 0), [], "Healthy", "Scaled to zero"),
    ],
)
def test_the_rollout_as_argo_cd_sees_it(
    lua: str,
    health_check: str,
    dep: dict[str, Any] | None,
    pods: list[dict[str, Any]],
    health: str,
    says: str,
) -> None:
    status, message = judge(lua, health_check, operated(llamaservice(), dep, pods))
    assert (status, message.startswith(says)) == (health, True), message


def test_a_refused_spec_is_degraded_with_the_operators_message(lua: str, health_check: str) -> None:
    refused = operated(llamaservice(accelerator={"type": "no-such-gpu"}), None, [])
    assert refused["status"]["phase"] == "Failed"
    status, message = judge(lua, health_check, refused)
    assert status == "Degraded" and message.startswith("PlanningFailed: ") and "no-such-gpu" in message


def test_an_object_the_operator_cannot_apply_is_degraded(lua: str, health_check: str) -> None:
    served = operated(llamaservice(), deployment(1, 1, 1), [])
    taken = ExecutionReport(conflicts=[ObjectRef("Service", "team-a", "chat")])
    status = report_execution(served["status"], served["status"], taken, now=NOW, generation=3)
    health, message = judge(lua, health_check, {**served, "status": status})
    assert health == "Degraded" and message.startswith("NameConflict: Service team-a/chat exists")


def test_a_pool_the_gateway_cannot_take_leaves_the_service_healthy(lua: str, health_check: str) -> None:
    served = operated(llamaservice(), deployment(1, 1, 1), [])
    pool = ObjectRef("InferencePool", "team-a", "chat")
    refused = ExecutionReport(conflicts=[pool])
    status = report_execution(
        served["status"], served["status"], refused, now=NOW, generation=3, inference_pool=pool
    )
    assert judge(lua, health_check, {**served, "status": status})[0] == "Healthy"
