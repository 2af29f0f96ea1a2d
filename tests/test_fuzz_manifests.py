"""Fuzzing the manifest path: whatever a user writes, parse, plan and render answer with the project's
own errors (InvalidSpecError, PlanningError: one line naming the field) or succeed; the command answers
0 or 1 with one line on stderr, never a traceback or an internal error (70)."""

from __future__ import annotations

import contextlib
import io
import tempfile
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from llama_operator import cli
from llama_operator.api.resource import InvalidSpecError, parse_llamaservice
from llama_operator.api.settings import Settings
from llama_operator.desired.objects import build_desired_state
from llama_operator.planning.inventory import Inventory, inventory_from_nodes
from llama_operator.planning.planner import PlanningError
from llama_operator.reconcile.outcome import plan_llamaservice
from tests.manifest_strategies import NODE_FOLDER, NODES, REPO, hostile_manifests, manifest_files, node_files

INVENTORIES: tuple[Inventory | None, ...] = (None, inventory_from_nodes(NODES))
FUZZ = settings(
    max_examples=2000,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.large_base_example],
)


def plan_and_render(manifest: Any, mig_strategy: str, inventory: Inventory | None) -> list[dict[str, Any]]:
    """What `llama-operator render` does with one document, minus the file."""
    parse_llamaservice(manifest)
    settings_ = Settings(mig_strategy=mig_strategy)
    svc, plan = plan_llamaservice(cli.with_stand_in_uid(manifest), settings_, inventory)
    return build_desired_state(svc, plan, settings_, pod_monitor=True).objects


@FUZZ
@given(
    manifest=hostile_manifests(),
    mig_strategy=st.sampled_from(("mixed", "single")),
    inventory=st.sampled_from(INVENTORIES),
)
def test_parse_plan_and_render_raise_only_user_errors(
    manifest: Any, mig_strategy: str, inventory: Inventory | None
) -> None:
    try:
        objects = plan_and_render(manifest, mig_strategy, inventory)
    except (InvalidSpecError, PlanningError) as err:
        event(type(err).__name__)  # --hypothesis-show-statistics: how far the manifests get
        message = str(err)
        assert message
        assert "\n" not in message
        assert len(message) < 2000
    else:
        event("rendered")
        assert "&id" not in cli.dump_yaml(objects)


def run_cli(*args: str) -> tuple[int, str, str]:
    """`llama-operator ARGS` in this process: (exit status, stdout, stderr)."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = cli.main(list(args))
    return code, out.getvalue(), err.getvalue()


@settings(FUZZ, max_examples=300)
@given(data=manifest_files(), command=st.sampled_from(("plan", "render")))
def test_the_command_answers_every_file_with_0_or_one_line_and_1(data: bytes, command: str) -> None:
    with tempfile.TemporaryDirectory() as folder:
        manifest = Path(folder) / "manifest.yaml"
        manifest.write_bytes(data)
        code, out, err = run_cli(command, "-f", str(manifest), "--nodes", str(NODE_FOLDER))
    assert code in {0, 1}, err
    if code == 0:
        assert out
        assert err == ""
    else:
        assert out == ""
        assert err.count("\n") == 1
        assert err.startswith(f"error: {manifest}")


@settings(FUZZ, max_examples=200)
@given(data=node_files(), example=st.sampled_from(sorted((REPO / "examples").glob("*.yaml"))))
def test_the_command_answers_every_node_inventory_with_0_or_one_line_and_1(
    data: bytes, example: Path
) -> None:
    with tempfile.TemporaryDirectory() as folder:
        nodes = Path(folder) / "nodes.yaml"
        nodes.write_bytes(data)
        code, out, err = run_cli("plan", "-f", str(example), "--nodes", str(nodes))
    assert code in {0, 1}, err
    assert (out != "") == (code == 0)
    assert err.count("\n") == (code == 1)
