"""One typed LlamaService between the I/O shell and the pure core: outside api/ (the contract, which parses
what the API server stored) and infra/ (which writes it back), nothing reads a LlamaService's spec or status
as raw dicts. The conditions parser was once written out six times; the autoscaler's state, last decision and
spec replicas each had readers of their own."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

from pydantic import BaseModel

import llama_operator
from llama_operator.api.autoscaling import AutoscalerState, AutoscalingStatus, ScalingDecision
from llama_operator.api.plan import Plan
from llama_operator.api.spec import LlamaServiceSpec
from llama_operator.api.status import LlamaServiceStatus

RUNTIME = Path(llama_operator.__path__[0])
# Where raw reads belong: the contract parses, infra writes. The router (activator/, router/) reads no
# LlamaService.
ALLOWED = ("api/", "infra/", "activator/", "router/")
# Field names a LlamaService shares with the other objects the operator reads and builds (Pods and their
# templates, Deployments, Nodes, CRDs, EndpointSlices) and with vLLM's JSON configs: read on those, they are not the LlamaService's.
SHARED = frozenset(
    {"spec", "status", "conditions", "phase", "replicas", "readyReplicas", "updatedReplicas",
     "observedGeneration", "selector", "model", "name", "type", "reason", "message", "time",
     "nodeAffinity", "nodeSelector", "tolerations", "resources", "image"}
)  # fmt: skip
# How the runtime names a LlamaService object (a kopf body, an indexed one, one the API server returned).
LLAMASERVICE_NAMES = frozenset({"body", "service", "svc", "llamaservice", "written"})


def _aliases(*models: type[BaseModel]) -> set[str]:
    return {f.alias or n for m in models for n, f in m.model_fields.items()}


# Keys only a LlamaService has: reading one of them raw reads a LlamaService.
OWN_KEYS = (
    _aliases(LlamaServiceSpec, LlamaServiceStatus, AutoscalingStatus, AutoscalerState, Plan, ScalingDecision)
    - SHARED
)


def raw_reads(tree: ast.AST) -> Iterator[ast.Call | ast.Subscript]:
    """`x.get("key")` and `x["key"]` that read a LlamaService: one of its own keys on anything, or its spec
    or status on an object named as a LlamaService."""
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "get"
            and node.args
            and isinstance(node.args[0], ast.Constant)
        ):
            key, receiver = node.args[0].value, node.func.value
        elif (
            isinstance(node, ast.Subscript)
            and isinstance(node.slice, ast.Constant)
            and isinstance(node.ctx, ast.Load)
        ):
            key, receiver = node.slice.value, node.value
        else:
            continue
        if not isinstance(key, str):
            continue
        named = isinstance(receiver, ast.Name) and receiver.id in LLAMASERVICE_NAMES
        if key in OWN_KEYS or (key in {"spec", "status"} and named):
            yield node


def test_no_raw_read_of_a_llamaservice_outside_api_and_infra() -> None:
    found = [
        f"{path.relative_to(RUNTIME).as_posix()}:{node.lineno}: {ast.unparse(node)}"
        for path in sorted(RUNTIME.rglob("*.py"))
        if not path.relative_to(RUNTIME).as_posix().startswith(ALLOWED)
        for node in raw_reads(ast.parse(path.read_text(encoding="utf-8")))
    ]
    assert found == []


def test_the_scan_sees_the_reads_it_forbids() -> None:
    code = (
        "a = status.get('autoscaling')\n"
        "b = body['spec']\n"
        "c = (body.get('status') or {}).get('plan')\n"
        "d = pod.get('status')\n"  # a Pod's: not a LlamaService read
        "e = deployment['spec']\n"
    )
    assert [n.lineno for n in raw_reads(ast.parse(code))] == [1, 2, 3, 3]
