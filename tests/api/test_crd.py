"""The committed CRD (and the chart's copy) must be exactly what the models generate, and structural."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from llama_operator.api.crd import (
    CHART_CRD_FILE,
    CRD_FILE,
    build_crd,
    render_chart_crd_template,
    render_crd_yaml,
)
from llama_operator.api.resource import InvalidSpecError, parse_spec

FIX = "regenerate with `make crd` (llama-operator crd > crds/...)"


def test_committed_crd_matches_generated(repo: Path) -> None:
    assert (repo / CRD_FILE).read_text() == render_crd_yaml(), f"{CRD_FILE} is stale: {FIX}"


def test_chart_crd_matches_generated(repo: Path) -> None:
    assert (repo / CHART_CRD_FILE).read_text() == render_chart_crd_template(), (
        f"{CHART_CRD_FILE} is stale: {FIX}"
    )


def _walk(node: Any, path: str = "") -> list[tuple[str, dict[str, Any]]]:
    found: list[tuple[str, dict[str, Any]]] = []
    if isinstance(node, dict):
        found.append((path, node))
        for k, v in node.items():
            found.extend(_walk(v, f"{path}.{k}"))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            found.extend(_walk(v, f"{path}[{i}]"))
    return found


def test_schema_is_structural() -> None:
    schema = build_crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    for path, node in _walk(schema):
        if path.endswith(".properties") or path.endswith("x-kubernetes-validations"):
            continue
        assert "$ref" not in node and "$defs" not in node, path
        assert "title" not in node or path.endswith(".properties"), path
        assert node.get("default", "unset") is not None, f"{path}: null default"
        if "anyOf" in node:
            assert node.get("x-kubernetes-int-or-string"), f"{path}: anyOf outside int-or-string"
        if "properties" in node and not path.endswith(".properties"):
            assert node.get("type") == "object", f"{path}: object without type"


def test_api_names_and_subresources() -> None:
    crd = build_crd()
    names = crd["spec"]["names"]
    assert (names["kind"], names["plural"], crd["spec"]["group"]) == (
        "LlamaService",
        "llamaservices",
        "serving.llama-operator.dev",
    )
    assert set(names["shortNames"]) == {"llama", "llamas"}
    version = crd["spec"]["versions"][0]
    assert version["name"] == "v1alpha1"
    assert version["subresources"]["scale"]["specReplicasPath"] == ".spec.replicas"
    assert {c["name"] for c in version["additionalPrinterColumns"]} >= {
        "Accelerator",
        "Ready",
        "TTFT",
        "Phase",
        "Age",
    }
    spec = version["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]
    # Open to the platform's own accelerators (config.accelerators): a name, the built-in ones listed.
    accelerator_type = spec["accelerator"]["properties"]["type"]
    assert "enum" not in accelerator_type and accelerator_type["pattern"] == "^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"
    for builtin in (
        "t4",
        "a10",
        "a10g",
        "l4",
        "l40s",
        "a100-40gb",
        "a100-80gb",
        "h100-pcie",
        "h100-80gb",
        "h200",
        "b200",
    ):
        assert builtin in accelerator_type["description"]
    assert accelerator_type["default"] == "auto"
    rules = [r["rule"] for r in spec["autoscaling"]["x-kubernetes-validations"]]
    assert any("minReplicas <= self.maxReplicas" in r for r in rules)
    # Every spec field explains itself to `kubectl explain`.
    for path, node in _walk(spec):
        if (
            path.endswith(".properties")
            or "x-kubernetes-validations" in path
            or "items" in path.split(".")[-1]
        ):
            continue
        if "type" in node or "x-kubernetes-int-or-string" in node:
            assert node.get("description"), f"spec{path} has no description"


def test_crd_yaml_round_trips() -> None:
    assert yaml.safe_load(render_crd_yaml().split("\n", 1)[1]) == build_crd()


def test_bitsandbytes_is_refused_at_apply(repo: Path) -> None:
    """Issue 8 case 4: the pinned vLLM has no bitsandbytes method, so the API no longer offers it. The CRD
    the apiserver enforces (the committed file, which `kubectl apply` validates against) refuses it by its
    enum, and the spec model refuses it naming the field."""
    committed = yaml.safe_load((repo / CRD_FILE).read_text())
    for crd in (committed, build_crd()):
        engine = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"][
            "engine"
        ]
        enum = engine["properties"]["quantization"]["enum"]
        assert "bitsandbytes" not in enum
        assert set(enum) == {"none", "awq", "gptq", "fp8", "int8"}
    with pytest.raises(InvalidSpecError) as err:
        parse_spec(
            {
                "model": {"name": "meta-llama/Llama-3.2-1B-Instruct"},
                "engine": {"quantization": "bitsandbytes"},
            }
        )
    assert "spec.engine.quantization" in str(err.value)


def test_the_status_names_the_urls_to_call() -> None:
    status = build_crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["status"]
    assert status["properties"]["url"]["type"] == "string"
    assert status["properties"]["routerUrl"]["type"] == "string"
