"""The chart's operator command line is one that `llama-operator run` and kopf accept: logFormat and
watchNamespaces become kopf's own options, parsed by kopf's click command."""

from __future__ import annotations

import subprocess

import pytest
import yaml
from kopf.cli import run as kopf_run

from llama_operator.cli import build_parser, kopf_run_args
from localcluster import info as cluster_info
from support import repo_root

pytestmark = pytest.mark.beside_operators


def rendered_args(*values: str) -> list[str]:
    cluster = cluster_info.load()
    if cluster is None:
        pytest.skip("no local cluster: helm comes with it")
    sets = [arg for value in values for arg in ("--set", value)]
    done = subprocess.run(
        [str(cluster.helm_path), "template", "x", str(repo_root() / "charts" / "llama-operator"), *sets],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    (deployment,) = [d for d in yaml.safe_load_all(done.stdout) if d and d["kind"] == "Deployment"]
    args: list[str] = deployment["spec"]["template"]["spec"]["containers"][0]["args"]
    return args


@pytest.mark.parametrize(
    ("values", "log_format", "namespaces"),
    [
        ((), "FULL", ()),
        (("logFormat=json", "watchNamespaces=team-a"), "JSON", ("team-a",)),
        (("logFormat=plain",), "PLAIN", ()),
    ],
)
def test_chart_args_parse_as_kopf_run(
    values: tuple[str, ...], log_format: str, namespaces: tuple[str, ...]
) -> None:
    args = rendered_args(*values)
    parsed, passed = build_parser().parse_known_args(args)  # as main() splits them
    assert parsed.command == "run"
    context = kopf_run.make_context("kopf run", kopf_run_args(passed)[1:])
    assert context.params["log_format"].name == log_format
    assert context.params["standalone"] is True
    assert context.params["namespaces"] == namespaces
    assert context.params["clusterwide"] is (not namespaces)
