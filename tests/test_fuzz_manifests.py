"""Fuzzing the manifest path: whatever a user writes, parse, plan and render answer with the project's
own errors (InvalidSpecError, PlanningError: one line naming the field) or succeed; the command answers
0 or 1 with one line on stderr, never a traceback or an internal error (70)."""

from __future__ import annotations

import contextlib
import io
import os
import tempfile
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from llama_operator import cli
from llama_operator.api.resource import InvalidSpecError, parse_llamaservice
from llama_operator.api.settings import Settings
from llama_operator.desired.objects import build_desired_state
from llama_operator.planning.errors import PlanningError
from llama_operator.planning.inventory import Inventory, inventory_from_nodes
from llama_operator.reconcile.outcome import plan_llamaservice
from tests.manifest_strategies import NODE_FOLDER, NODES, REPO, hostile_manifests, manifest_files, node_files

INVENTORIES: tuple[Inventory | None, ...] = (None, inventory_from_nodes(NODES))
# The unit layer runs a fifth of the deep run's examples (it must stay under a minute); `make fuzz` runs
# them all (LLAMA_OPERATOR_FUZZ_SCALE=5).
FUZZ_SCALE = float(os.environ.get("LLAMA_OPERATOR_FUZZ_SCALE", "1"))


def examples(deep: int) -> int:
    return max(10, round(deep / 5 * FUZZ_SCALE))


FUZZ = settings(
    max_examples=examples(2000),
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


@settings(FUZZ, max_examples=examples(300))
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


@settings(FUZZ, max_examples=examples(200))
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


# Issue 24's edge inputs: integer literals of any length in any field, in any YAML spelling of an integer.
_VALID = (
    "apiVersion: serving.llama-operator.dev/v1alpha1\nkind: LlamaService\nmetadata: {name: chat}\n"
    "spec: {model: {name: meta-llama/Llama-3.2-1B-Instruct}, accelerator: {type: t4, count: COUNT}, "
    "replicas: REPLICAS, engine: {maxModelLen: LEN}}\n"
)


@st.composite
def integer_literals(draw: st.DrawFn) -> str:
    digits = draw(st.integers(1, 6_000))
    spelling = draw(st.sampled_from(("{d}", "-{d}", "+{d}", "0x{h}", "0{o}", "{d}_0", "0b{b}")))
    return spelling.format(d="9" * digits, h="f" * digits, o="7" * digits, b="1" * digits)


@settings(FUZZ, max_examples=examples(150))
@given(
    count=integer_literals(),
    replicas=integer_literals(),
    length=integer_literals(),
    command=st.sampled_from(("plan", "render")),
)
def test_integers_of_any_length_answer_0_or_1(count: str, replicas: str, length: str, command: str) -> None:
    text = _VALID.replace("COUNT", count).replace("REPLICAS", replicas).replace("LEN", length)
    with tempfile.TemporaryDirectory() as folder:
        manifest = Path(folder) / "manifest.yaml"
        manifest.write_text(text)
        code, _, err = run_cli(command, "-f", str(manifest))
    assert code in {0, 1}, err
    assert "internal error" not in err
    if any(
        len(n.replace("_", "").lstrip("+-")) > cli.MAX_INTEGER_CHARACTERS for n in (count, replicas, length)
    ):
        assert code == 1
        assert "64-bit" in err


@settings(FUZZ, max_examples=examples(20))
@given(size=st.sampled_from((cli.MAX_INPUT_BYTES + 1, cli.MAX_INPUT_BYTES * 3)), device=st.booleans())
def test_oversized_inputs_and_devices_are_refused_with_one_line(size: int, device: bool) -> None:
    with tempfile.TemporaryDirectory() as folder:
        manifest = Path(folder) / "manifest.yaml"
        manifest.write_bytes(b"#" * size)
        path = "/dev/zero" if device else str(manifest)
        code, out, err = run_cli("plan", "-f", path)
    assert (code, out) == (1, "")
    assert err.count("\n") == 1
    assert err.startswith(f"error: {path}: ")
