"""Fuzzing the user's input: whatever a manifest holds, parse, plan and render raise nothing but the
project's own errors (a clear message for the user), and the CLI exits 0 or 1 with one line on stderr,
never with a traceback."""

from __future__ import annotations

import contextlib
import io
import sys
from pathlib import Path
from typing import Any

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from llama_operator.api.resource import InvalidSpecError, parse_llamaservice
from llama_operator.api.settings import Settings
from llama_operator.cli import main
from llama_operator.desired.objects import build_desired_state
from llama_operator.planning.errors import PlanningError
from llama_operator.reconcile.outcome import plan_llamaservice
from tests.fuzz_manifests import deep, manifests

SETTINGS = Settings()


def parse_plan_render(doc: Any) -> None:
    svc = parse_llamaservice(doc)
    meta = {
        "namespace": "default",
        **(doc.get("metadata") or {}),
        "uid": "00000000-0000-4000-8000-000000000000",
    }
    _, plan = plan_llamaservice({**doc, "metadata": meta}, SETTINGS, None)
    build_desired_state(
        svc.model_copy(update={"metadata": svc.metadata.model_copy(update={"uid": meta["uid"]})}),
        plan,
        SETTINGS,
        pod_monitor=True,
    )


OUTCOMES: dict[str, int] = {"planned": 0, "invalid spec": 0, "refused by the planner": 0}


@settings(max_examples=2000, deadline=None, suppress_health_check=list(HealthCheck))
@given(manifests())
def test_parse_plan_render_raise_only_user_errors(doc: Any) -> None:
    message = ""
    try:
        parse_plan_render(doc)
        OUTCOMES["planned"] += 1
    except (InvalidSpecError, PlanningError) as err:  # the user's errors; anything else fails the test
        OUTCOMES["invalid spec" if isinstance(err, InvalidSpecError) else "refused by the planner"] += 1
        message = str(err)
    assert message == "" or message.strip()


def test_the_fuzzer_reaches_the_planner_and_the_builder() -> None:
    # Run after the fuzz test above (file order): mutations must not all stop at the parser.
    assert sum(OUTCOMES.values()) >= 2000, OUTCOMES
    assert OUTCOMES["planned"] >= 20, OUTCOMES  # whole manifests planned and rendered
    assert OUTCOMES["refused by the planner"] >= 100, OUTCOMES  # past the parser, into the planner


def run_cli(args: list[str], stdin: bytes = b"") -> tuple[int, str]:
    err = io.StringIO()
    out = io.StringIO()
    stdin_wrapper = io.TextIOWrapper(io.BytesIO(stdin), encoding="utf-8")
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(out):
        old_stdin = sys.stdin
        sys.stdin = stdin_wrapper
        try:
            code = main(args)
        finally:
            sys.stdin = old_stdin
    return code, err.getvalue()


@settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck))
@given(doc=manifests(), command=st.sampled_from(["plan", "render"]))
def test_the_cli_never_crashes(doc: Any, command: str, tmp_path_factory: Any) -> None:
    path = Path(tmp_path_factory.mktemp("fuzz")) / "m.yaml"
    try:
        path.write_text(yaml.safe_dump(doc))
    except (yaml.YAMLError, RecursionError, UnicodeEncodeError):
        path.write_bytes(b"\xff\xfe not utf-8")
    code, err = run_cli([command, "-f", str(path)])
    assert code in (0, 1), err
    assert code == 0 or len(err.strip().splitlines()) == 1, err


def test_measured_crashes_are_input_errors(tmp_path: Path) -> None:
    cases = {
        "name-int.yaml": b"apiVersion: serving.llama-operator.dev/v1alpha1\nkind: LlamaService\nmetadata: {name: 123}\nspec: {model: {name: x}}\n",
        "meta-list.yaml": b"apiVersion: serving.llama-operator.dev/v1alpha1\nkind: LlamaService\nmetadata: [a]\nspec: {}\n",
        "spec-list.yaml": b"apiVersion: serving.llama-operator.dev/v1alpha1\nkind: LlamaService\nmetadata: {name: a}\nspec: [1]\n",
        "spec-str.yaml": b"apiVersion: serving.llama-operator.dev/v1alpha1\nkind: LlamaService\nmetadata: {name: a}\nspec: x\n",
        "deep.yaml": ("a: " + "[" * 600 + "]" * 600 + "\n").encode(),
        "binary.yaml": b"\xff\xfe\x00garbage",
        "bad.yaml": b"a: [1, 2\nb: }",
        "scalar.yaml": b"just a string\n",
    }
    for name, content in cases.items():
        path = tmp_path / name
        path.write_bytes(content)
        for command in ("plan", "render"):
            code, err = run_cli([command, "-f", str(path)])
            assert code == 1, (name, err)
            assert len(err.strip().splitlines()) == 1, (name, err)
            assert "internal error" not in err, (name, err)
    code, err = run_cli(["plan", "-f", str(tmp_path / "bad.yaml")])
    assert str(tmp_path / "bad.yaml") in err  # the file, where the YAML breaks
    code, err = run_cli(["plan", "-f", str(tmp_path)])  # a folder is read like kubectl reads one
    assert code == 1 and str(tmp_path) in err
    code, err = run_cli(["plan", "-f", "-"], stdin=b"kind: LlamaService\n")
    assert code == 1 and err.startswith("error:")


def test_deep_nesting_value() -> None:
    assert deep(3) == [{"a": ["x"]}]
