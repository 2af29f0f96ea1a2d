"""The command line as users and checks call it: a real subprocess of `python -m llama_operator`."""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import subprocess
import sys
import time
from importlib import metadata as package_metadata
from pathlib import Path

import pytest
import yaml

from llama_operator.api.crd import CRD_FILE
from llama_operator.cli import (
    EXIT_INTERNAL_ERROR,
    MAX_INPUT_BYTES,
    build_parser,
    cmd_plan,
    dump_yaml,
    kopf_run_args,
    main,
    run_command,
)

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


# Input errors: one line on stderr that names the file, exit status 1, nothing on stdout. In-process
# (`cli.main`, what the console script calls) to keep them fast; the subprocess tests above cover the entry.
VALID = (
    "apiVersion: serving.llama-operator.dev/v1alpha1\nkind: LlamaService\nmetadata: {name: chat}\n"
    "spec: {model: {name: meta-llama/Llama-3.2-1B-Instruct}, accelerator: {type: t4}}\n"
)


def test_plan_with_no_gpu_node_and_a_nodepool_that_creates_l4s_plans_an_l4(repo: Path) -> None:
    done = cli(
        "plan",
        "-f",
        "examples/auto.yaml",
        "--nodes",
        "e2e/nodes/cpu-1.yaml",
        "--nodes",
        "e2e/karpenter/eks-gpu-l4-nodepool.yaml",
        "-o",
        "yaml",
        cwd=repo,
    )
    assert done.returncode == 0, done.stderr
    plan = yaml.safe_load(done.stdout)
    assert plan["accelerator"] == "l4"
    assert plan["nodeSelector"]["karpenter.k8s.aws/instance-gpu-name"] == "l4"
    assert any("a new node will be provisioned by Karpenter NodePool gpu-l4" in n for n in plan["notes"])


def run_cli(*args: str) -> tuple[int, str, str]:
    """`llama-operator ARGS` in this process: (exit status, stdout, stderr)."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(list(args))
    return code, out.getvalue(), err.getvalue()


def input_error(*args: str) -> str:
    """The one line of an input error (asserting exit status 1, one line, no output)."""
    code, out, err = run_cli(*args)
    assert (code, out) == (1, ""), err
    assert err.count("\n") == 1, err
    assert err.startswith("error: ")
    assert "Traceback" not in err
    return err.removeprefix("error: ").rstrip("\n")


def write(tmp_path: Path, name: str, content: str | bytes) -> str:
    path = tmp_path / name
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content)
    return str(path)


@pytest.mark.parametrize("command", ["plan", "render"])
def test_broken_yaml_names_the_file_line_and_column(tmp_path: Path, command: str) -> None:
    path = write(tmp_path, "broken.yaml", "kind: LlamaService\nspec: {model: [a\n")
    line = input_error(command, "-f", path)
    assert line.startswith(f"{path}:3:1: invalid YAML: ")
    assert "<unicode string>" not in line


def test_non_utf8_file_is_named_with_the_byte(tmp_path: Path) -> None:
    path = write(tmp_path, "latin1.yaml", VALID.encode() + b"  # caf\xe9\n")
    assert input_error("plan", "-f", path) == (
        f"{path}:5: not UTF-8 text (byte 0xe9 at offset {len(VALID) + 7}); save the manifest as UTF-8"
    )


def test_control_character_is_an_input_error(tmp_path: Path) -> None:
    path = write(tmp_path, "ctl.yaml", VALID + "x: \x01\n")
    assert (
        input_error("plan", "-f", path) == f"{path}:5: invalid YAML: character U+0001 is not allowed in YAML"
    )


def test_missing_file(tmp_path: Path) -> None:
    path = str(tmp_path / "absent.yaml")
    assert input_error("render", "-f", path) == f"{path}: no such file or directory"


def test_missing_node_inventory(tmp_path: Path, repo: Path) -> None:
    path = str(tmp_path / "nodes")
    assert input_error("plan", "-f", str(repo / "examples/auto.yaml"), "--nodes", path) == (
        f"{path}: no such file or directory"
    )


def test_a_directory_is_read_like_kubectl_apply(tmp_path: Path) -> None:
    (tmp_path / "b.yml").write_text(VALID.replace("name: chat", "name: second"))
    (tmp_path / "a.yaml").write_text(VALID)
    (tmp_path / "notes.txt").write_text("not a manifest: [")
    code, out, err = run_cli("plan", "-f", str(tmp_path))
    assert (code, err) == (0, "")
    plans = json.loads(out)
    # Each plan names its LlamaService (issue 43: a directory's plans came without their names).
    assert [(p["name"], p["namespace"], p["plan"]["accelerator"]) for p in plans] == [
        ("chat", "default", "t4"),
        ("second", "default", "t4"),
    ]
    code, out, err = run_cli("render", "-f", str(tmp_path))
    assert code == 0, err
    assert [d["metadata"]["name"] for d in yaml.safe_load_all(out) if d["kind"] == "Deployment"] == [
        "chat",
        "second",
    ]


def test_a_directory_without_manifests_says_so(tmp_path: Path) -> None:
    (tmp_path / "readme.md").write_text("#")
    assert input_error("plan", "-f", str(tmp_path)) == (
        f"{tmp_path}: a directory with no .yaml, .yml, .json files"
    )


def test_an_error_in_a_directory_names_the_file(tmp_path: Path) -> None:
    (tmp_path / "a.yaml").write_text(VALID)
    bad = write(tmp_path, "b.yaml", VALID.replace("type: t4", "type: [t4]"))
    line = input_error("plan", "-f", str(tmp_path))
    assert line.startswith(f"{bad}: spec.accelerator.type: ")


def test_help_explains_stdin_and_directories(repo: Path) -> None:
    done = cli("plan", "--help", cwd=repo)
    assert done.returncode == 0
    text = " ".join(done.stdout.split())
    assert "or - to read standard input" in text
    assert "a directory (its *.yaml, *.yml and *.json files, as kubectl apply -f DIR reads them" in text


@pytest.mark.parametrize(
    ("document", "field", "problem"),
    [
        ("metadata: [a]\nspec: {model: {name: m}}", "metadata", "expected a mapping, got a list"),
        ("metadata: {name: 123}\nspec: {model: {name: m}}", "metadata.name", "DNS-1035 label"),
        ("metadata: {name: x}\nspec: [a]", "spec", "expected a mapping, got a list"),
        ("metadata: {name: x}\nspec: hello", "spec", "expected a mapping, got a string"),
        ("metadata: {name: x}\nspec: {model: m}", "spec.model", "valid dictionary"),
        ("metadata: {name: x}\nspec: {model: {name: [m]}}", "spec.model.name", "valid string"),
        ("metadata: {name: x}\nspec: {model: {name: m}, engine: 1}", "spec.engine", "valid dictionary"),
        (
            "metadata: {name: x}\nspec: {model: {name: m}, autoscaling: {slo: []}}",
            "spec.autoscaling.slo",
            "valid dictionary",
        ),
        (
            "metadata: {name: x, labels: [a]}\nspec: {model: {name: m}}",
            "metadata.labels",
            "valid dictionary",
        ),
        (
            "metadata: {name: x}\nspec: {model: {name: meta-llama/Llama-3.2-1B}, engine: {extraArgs: [--port, '1']}}",
            "spec.engine.extraArgs[0]",
            "set by the operator",
        ),
    ],
)
def test_a_wrong_type_names_the_field(tmp_path: Path, document: str, field: str, problem: str) -> None:
    header = "apiVersion: serving.llama-operator.dev/v1alpha1\nkind: LlamaService\n"
    path = write(tmp_path, "svc.yaml", header + document + "\n")
    line = input_error("render", "-f", path)
    assert line.startswith(f"{path}: {field}")
    assert problem in line


@pytest.mark.parametrize(
    ("content", "problem"),
    [
        ("[a, b]\n", "a manifest must be a mapping (apiVersion, kind, ...), not a list"),
        ("just text\n", "a manifest must be a mapping (apiVersion, kind, ...), not a str ('just text')"),
        ("kind: Service\n", "no LlamaService found (kind: LlamaService)"),
        ("", "no LlamaService found (kind: LlamaService)"),
    ],
)
def test_documents_that_are_not_llamaservices(tmp_path: Path, content: str, problem: str) -> None:
    path = write(tmp_path, "doc.yaml", content)
    assert input_error("plan", "-f", path) == f"{path}: {problem}"


def test_the_document_is_named_in_a_multi_document_file(tmp_path: Path) -> None:
    path = write(tmp_path, "two.yaml", VALID + "---\n" + VALID.replace("name: chat", "name: Chat"))
    assert input_error("plan", "-f", path).startswith(f"{path}: document 2: metadata.name must be")


@pytest.mark.parametrize(
    ("content", "problem"),
    [
        ("spec: " + "[" * 600 + "]" * 600, "5:106: invalid YAML: nested deeper than 100 levels"),
        ("spec:\n" + "".join(" " * i + "a:\n" for i in range(600)), "105:100: invalid YAML: nested deeper"),
        ("spec: &a [*a]", "5:11: invalid YAML: alias *a refers to a node that contains it"),
        (
            "a: &a [x, x, x, x, x, x, x, x, x, x]\n"
            + "".join(f"a{i}: &a{i} [{', '.join([f'*a{i - 1}' if i else '*a'] * 10)}]\n" for i in range(9)),
            "1:1: invalid YAML: aliases expand this document to 12345679039 nodes",
        ),
    ],
)
def test_nesting_and_alias_bombs_are_input_errors(tmp_path: Path, content: str, problem: str) -> None:
    path = write(tmp_path, "bomb.yaml", VALID + content + "\n")
    assert input_error("plan", "-f", path).startswith(f"{path}:{problem}")


def test_yaml_dates_are_strings_as_in_kubectl(tmp_path: Path) -> None:
    # kubectl sends JSON, which has no dates: `revision: 2024-01-01` is the string the user meant.
    manifest = VALID.replace("Llama-3.2-1B-Instruct}", "Llama-3.2-1B-Instruct, revision: 2024-01-01}")
    code, out, err = run_cli("plan", "-f", write(tmp_path, "rev.yaml", manifest))
    assert (code, err) == (0, "")
    args = json.loads(out)["vllmArgs"]
    assert args[args.index("--revision") + 1] == "2024-01-01"


def test_a_kind_list_is_read_as_its_items(tmp_path: Path) -> None:
    items = yaml.safe_load(VALID)
    path = write(
        tmp_path, "list.yaml", yaml.safe_dump({"apiVersion": "v1", "kind": "List", "items": [items]})
    )
    code, out, err = run_cli("plan", "-f", path)
    assert (code, err) == (0, "")
    assert json.loads(out)["accelerator"] == "t4"


@pytest.mark.parametrize(
    ("node", "problem"),
    [
        ("metadata: {name: n, labels: [a]}", "Node metadata.labels must map names to strings"),
        ("metadata: {name: n, labels: {a: 1}}", "Node metadata.labels must map names to strings"),
        ("status: {allocatable: {1: 2}}", "Node status.allocatable must map resource names to quantities"),
        ("status: [a]", "Node status must be a mapping"),
    ],
)
def test_node_inventory_of_the_wrong_shape_is_an_input_error(
    tmp_path: Path, repo: Path, node: str, problem: str
) -> None:
    nodes = write(tmp_path, "node.yaml", f"apiVersion: v1\nkind: Node\n{node}\n")
    assert (
        input_error("plan", "-f", str(repo / "examples/auto.yaml"), "--nodes", nodes) == f"{nodes}: {problem}"
    )


def test_stdin_is_named_in_errors(repo: Path) -> None:
    done = cli("plan", "-f", "-", stdin="kind: [", cwd=repo)
    assert done.returncode == 1
    assert done.stderr.startswith("error: <stdin>:1:")
    assert done.stderr.count("\n") == 1


def test_an_internal_error_exits_70_with_one_line() -> None:
    # A command run without the options the parser gives it: a programming error, not the user's.
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        code = run_command(argparse.Namespace(func=cmd_plan, debug=False))
    assert code == EXIT_INTERNAL_ERROR == 70
    assert err.getvalue() == (
        "llama-operator: internal error: AttributeError: 'Namespace' object has no attribute 'mig_strategy' "
        "(rerun with --debug for the traceback)\n"
    )


def test_debug_shows_the_traceback_of_an_internal_error() -> None:
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        code = run_command(argparse.Namespace(func=cmd_plan, debug=True))
    assert code == 70
    assert err.getvalue().startswith("Traceback (most recent call last):")
    assert err.getvalue().endswith("(rerun with --debug for the traceback)\n")


@pytest.mark.parametrize("where", ["before", "after"])
def test_debug_is_accepted_before_and_after_the_command(tmp_path: Path, where: str) -> None:
    path = write(tmp_path, "svc.yaml", VALID)
    args = ["--debug", "plan", "-f", path] if where == "before" else ["plan", "-f", path, "--debug"]
    code, _, err = run_cli(*args)
    assert (code, err) == (0, "")
    assert build_parser().parse_args(args).debug is True
    assert build_parser().parse_args(["plan", "-f", path]).debug is False


def test_a_user_error_under_debug_stays_one_line(tmp_path: Path) -> None:
    path = write(tmp_path, "svc.yaml", VALID.replace("type: t4", "type: x"))
    code, _, err = run_cli("--debug", "plan", "-f", path)
    assert code == 1
    assert err.count("\n") == 1


def test_version_prints_the_package_version(repo: Path) -> None:
    done = cli("--version", cwd=repo)
    assert done.returncode == 0
    assert done.stdout == f"llama-operator {package_metadata.version('llama-operator')}\n"


def test_render_output_has_no_yaml_anchors(repo: Path) -> None:
    for example in sorted((repo / "examples").rglob("*.yaml")):
        code, out, err = run_cli(
            "render", "-f", str(example), "--pod-monitor", "--nodes", str(repo / "e2e/nodes")
        )
        assert code == 0, err
        assert "&id" not in out
        assert "*id" not in out


def test_shared_objects_are_written_out_each_time() -> None:
    labels = {"app": "chat"}
    text = dump_yaml([{"metadata": {"labels": labels}, "selector": labels}])
    assert text == "---\nmetadata:\n  labels:\n    app: chat\nselector:\n  app: chat\n"


def test_run_help_lists_kopfs_own_options(repo: Path) -> None:
    from kopf.cli import run as kopf_run  # noqa: PLC0415 - kopf's click command, the source of truth

    done = cli("run", "--help", cwd=repo)
    assert done.returncode == 0, done.stderr
    assert "options of `kopf run`" in done.stdout
    for param in kopf_run.params:
        if param.name in ("modules", "paths"):  # llama-operator sets the module itself
            assert "--module" not in done.stdout
            continue
        for option in param.opts:
            assert option in done.stdout, f"`run --help` does not list kopf's {option}"
    assert "--log-format [plain|full|json]" in done.stdout


@pytest.mark.parametrize(
    ("passed", "namespaces", "clusterwide"),
    [([], (), True), (["--namespace=team-a", "-n", "team-b"], ("team-a", "team-b"), False)],
)
def test_run_hands_kopf_a_command_line_it_parses(
    passed: list[str], namespaces: tuple[str, ...], clusterwide: bool
) -> None:
    from kopf.cli import run as kopf_run  # noqa: PLC0415 - kopf's own click command parses it

    args = kopf_run_args(["--standalone", "--log-format=json", *passed])
    assert args[0] == "run"
    context = kopf_run.make_context("kopf run", args[1:])
    assert context.params["log_format"].name == "JSON"
    assert context.params["standalone"] is True
    assert context.params["modules"] == ("llama_operator.handlers",)
    assert context.params["namespaces"] == namespaces
    assert context.params["clusterwide"] is clusterwide


# Input limits (issue 24): what once exited 70 (an internal error) or ran for seconds is a clear exit 1.
@pytest.mark.parametrize(
    "field",
    [
        "replicas: " + "9" * 5000,  # more digits than Python's int() converts
        "replicas: " + "9" * 25,
        "replicas: -" + "9" * 4400,
        "replicas: 0x" + "f" * 5000,
        "replicas: 1" + "_0" * 3000,
    ],
)
def test_huge_integers_are_input_errors_before_conversion(tmp_path: Path, field: str) -> None:
    path = write(
        tmp_path,
        "big.yaml",
        VALID.replace("accelerator: {type: t4}}", "accelerator: {type: t4}, " + field + "}"),
    )
    message = input_error("plan", "-f", path)
    assert message.startswith(f"{path}:4:")
    assert "64-bit" in message
    assert "9999" not in message


def test_an_integer_beyond_int64_is_refused_as_kubernetes_would(tmp_path: Path) -> None:
    path = write(
        tmp_path, "big.yaml", VALID.replace("{type: t4}}", "{type: t4}, replicas: 9223372036854775808}")
    )
    assert "64-bit range" in input_error("plan", "-f", path)


def test_the_largest_int64_still_reaches_the_schema(tmp_path: Path) -> None:
    path = write(
        tmp_path, "big.yaml", VALID.replace("{type: t4}}", "{type: t4}, replicas: 9223372036854775807}")
    )
    assert "replicas" in input_error("plan", "-f", path)  # the schema's bound (<= 1000), not the reader's


def test_dev_zero_is_refused_at_once(tmp_path: Path) -> None:
    assert input_error("plan", "-f", "/dev/zero") == "/dev/zero: a device, not a file of manifests"
    assert input_error("render", "-f", "/dev/urandom") == "/dev/urandom: a device, not a file of manifests"


def test_a_file_above_the_size_cap_is_refused_before_parsing(tmp_path: Path) -> None:
    padding = "#" * 1023 + "\n"
    big = write(tmp_path, "big.yaml", VALID + padding * (MAX_INPUT_BYTES // 1024 + 1))
    started = time.monotonic()
    message = input_error("plan", "-f", big)
    assert time.monotonic() - started < 2  # refused unread: a 26 MB file took 14 s to parse
    assert message.startswith(f"{big}: larger than 8 MiB")
    just_below = write(tmp_path, "ok.yaml", VALID + padding * (MAX_INPUT_BYTES // 1024 - 2))
    code, _, err = run_cli("plan", "-f", just_below)
    assert code == 0, err


def test_stdin_above_the_size_cap_is_refused(repo: Path) -> None:
    done = cli("plan", "-f", "-", stdin=VALID + "#" * (MAX_INPUT_BYTES + 1), cwd=repo)
    assert done.returncode == 1
    assert (
        done.stderr
        == "error: <stdin>: larger than 8 MiB, more than manifests or a node list hold (the API server takes 3 MiB a request); split it\n"
    )


H20_MANIFEST = {
    "apiVersion": "serving.llama-operator.dev/v1alpha1",
    "kind": "LlamaService",
    "metadata": {"name": "on-h20"},
    "spec": {"model": {"name": "meta-llama/Llama-3.2-1B-Instruct"}, "accelerator": {"type": "h20"}},
}
# docs/install.md's example: chart values that add an h20 (their config: is what the operator reads).
H20_VALUES = Path(__file__).resolve().parents[1] / "docs" / "examples" / "h20-values.yaml"
H20_CONFIG = {"migStrategy": "single", **yaml.safe_load(H20_VALUES.read_text())["config"]}


@pytest.mark.parametrize("command", ["plan", "render"])
def test_plan_and_render_read_the_operators_config(repo: Path, tmp_path: Path, command: str) -> None:
    manifest = yaml.safe_dump(H20_MANIFEST)
    # Without the operator's config the catalog has no h20.
    done = cli(command, "-f", "-", stdin=manifest, cwd=repo)
    assert done.returncode == 1 and "h20" in done.stderr
    config = tmp_path / "config.yaml"
    config.write_text(yaml.safe_dump(H20_CONFIG))
    done = cli(command, "-f", "-", "--config", str(config), stdin=manifest, cwd=repo)
    assert done.returncode == 0, done.stderr
    assert "NVIDIA-H20" in done.stdout


def test_a_config_the_operator_would_refuse_is_one_line_naming_it(repo: Path, tmp_path: Path) -> None:
    config = tmp_path / "config.yaml"
    config.write_text(yaml.safe_dump({**H20_CONFIG, "accelerators": {"h20": {"memoryMiB": 97871}}}))
    done = cli("plan", "-f", "-", "--config", str(config), stdin=yaml.safe_dump(H20_MANIFEST), cwd=repo)
    assert done.returncode == 1 and done.stderr.count("\n") == 1
    assert str(config) in done.stderr and "bandwidthGBps" in done.stderr
    done = cli("plan", "-f", "-", "--config", str(tmp_path / "missing.yaml"), stdin="", cwd=repo)
    assert done.returncode == 1 and "missing.yaml" in done.stderr


def test_a_mig_strategy_given_on_the_command_line_wins_over_the_config(repo: Path, tmp_path: Path) -> None:
    config = tmp_path / "config.yaml"
    config.write_text(yaml.safe_dump({"migStrategy": "single"}))
    single = cli("plan", "-f", "examples/mig-mixed.yaml", "--config", str(config), cwd=repo)
    assert json.loads(single.stdout)["migStrategy"] == "single", single.stderr
    mixed = cli(
        "plan", "-f", "examples/mig-mixed.yaml", "--config", str(config), "--mig-strategy", "mixed", cwd=repo
    )
    assert json.loads(mixed.stdout)["resources"] == {"nvidia.com/mig-1g.10gb": "1"}


def test_a_chart_values_file_previews_its_config(repo: Path, tmp_path: Path) -> None:
    values = tmp_path / "values.yaml"
    values.write_text(yaml.safe_dump({"replicaCount": 2, "config": H20_CONFIG}))
    done = cli("plan", "-f", "-", "--config", str(values), stdin=yaml.safe_dump(H20_MANIFEST), cwd=repo)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["nodeSelector"] == {"nvidia.com/gpu.product": "NVIDIA-H20"}


@pytest.mark.parametrize(
    ("value", "tag"),
    [
        ("!!int ''", "!!int"),
        ("!!int x", "!!int"),
        ("!!bool maybe", "!!bool"),
        ("!!timestamp x", "!!timestamp"),
        ("!!float x", "!!float"),
    ],
)
def test_an_explicit_tag_on_a_value_it_cannot_hold_is_one_line_and_exit_1(
    tmp_path: Path, value: str, tag: str
) -> None:
    # Issue 43: these exited 70 ("internal error: IndexError", "ValueError", "KeyError", "AttributeError").
    path = write(tmp_path, "tagged.yaml", VALID.replace("{type: t4}}", f"{{type: t4}}, replicas: {value}}}"))
    for command in ("plan", "render"):
        line = input_error(command, "-f", path)
        assert line.startswith(f"{path}:") and line.endswith(
            f"invalid YAML: a value tagged {tag} that is not one"
        )


def test_a_fifo_is_refused_instead_of_blocking(tmp_path: Path) -> None:
    # Issue 43: `-f` on a FIFO with no writer blocked forever.
    fifo = tmp_path / "manifests"
    os.mkfifo(fifo)
    assert (
        input_error("plan", "-f", str(fifo))
        == f"{fifo}: not a regular file (a FIFO or socket); pipe it to -f - instead"
    )
