"""The real API server rejects invalid LlamaServices at apply time, naming the field (CRD schema + CEL)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from support import Cluster, repo_root

pytestmark = pytest.mark.e2e


def manifest(name: str, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "serving.llama-operator.dev/v1alpha1",
        "kind": "LlamaService",
        "metadata": {"name": name},
        "spec": {"model": {"name": "meta-llama/Llama-3.2-1B-Instruct"}, **spec},
    }


INVALID = [
    (
        "min-over-max",
        {"autoscaling": {"minReplicas": 5, "maxReplicas": 2}},
        ["spec.autoscaling.minReplicas", "minReplicas must be less than or equal to maxReplicas"],
    ),
    (
        # A name ("tpu-v5") may be a platform-defined accelerator (config.accelerators): the operator judges
        # it; what is no name at all the API server refuses.
        "not-an-accelerator-name",
        {"accelerator": {"type": "TPU_v5"}},
        ["spec.accelerator.type", "should match"],
    ),
    (
        "mig-on-t4",
        {"accelerator": {"type": "t4", "mig": "1g.10gb"}},
        ["spec.accelerator.mig", "mig must be a MIG profile of the chosen type"],
    ),
    ("wrong-mig-profile", {"accelerator": {"type": "a100-40gb", "mig": "1g.10gb"}}, ["spec.accelerator.mig"]),
    (
        "count-with-mig",
        {"accelerator": {"type": "a100-80gb", "mig": "1g.10gb", "count": 2}},
        ["spec.accelerator.count", "count must be 1 with a MIG slice"],
    ),
    ("negative-slo", {"autoscaling": {"slo": {"ttftSeconds": -0.5}}}, ["spec.autoscaling.slo.ttftSeconds"]),
    ("bad-percentile", {"autoscaling": {"slo": {"percentile": 100}}}, ["spec.autoscaling.slo.percentile"]),
    # An objective meant in milliseconds (issue 43): refused naming the field, the unit and the fix.
    (
        "ttft-in-milliseconds",
        {"autoscaling": {"slo": {"ttftSeconds": 500}}},
        ["spec.autoscaling.slo.ttftSeconds", "is in seconds and at most 60", "0.5 for 500 ms"],
    ),
    (
        "experts-without-experts-per-token",
        {
            "model": {
                "name": "acme/moe",
                "architecture": {
                    "layers": 32,
                    "kvHeads": 8,
                    "headDim": 128,
                    "parameters": 46_702_792_704,
                    "maxContext": 32768,
                    "experts": 8,
                },
            }
        },
        ["spec.model.architecture.experts", "set both or neither"],
    ),
    (
        "tpot-in-milliseconds",
        {"autoscaling": {"slo": {"tpotSeconds": 40}}},
        ["spec.autoscaling.slo.tpotSeconds", "is in seconds and at most 5", "0.05 for 50 ms"],
    ),
    ("bad-num-seqs", {"engine": {"maxNumSeqs": "lots"}}, ["spec.engine.maxNumSeqs", "'auto' or an integer"]),
    ("bad-dtype", {"engine": {"dtype": "fp4"}}, ["spec.engine.dtype", "Unsupported value"]),
    ("no-model", {"model": None}, ["spec.model"]),
    ("negative-replicas", {"replicas": -1}, ["spec.replicas"]),
    ("unknown-field", {"acelerator": {"type": "t4"}}, ['unknown field "spec.acelerator"']),
    ("memory-fraction-high", {"engine": {"gpuMemoryUtilization": 1.5}}, ["spec.engine.gpuMemoryUtilization"]),
    (
        "memory-fraction-map",
        {"engine": {"gpuMemoryUtilization": {"oops": 1}}},
        ["spec.engine.gpuMemoryUtilization"],
    ),
    (
        "memory-fraction-word",
        {"engine": {"gpuMemoryUtilization": "auto"}},
        ["spec.engine.gpuMemoryUtilization"],
    ),
    (
        "size-limit-word",
        {"model": {"name": "x/y", "cache": {"sizeLimit": "lots"}}},
        ["sizeLimit must be a positive"],
    ),
    (
        "extra-args-value-first",
        {"engine": {"extraArgs": ["9000"]}},
        ["extraArgs must start with a vLLM flag"],
    ),
    ("extra-args-token", {"engine": {"extraArgs": ["--hf-token", "hf_x"]}}, ["must not carry secrets"]),
    ("extra-args-api-key", {"engine": {"extraArgs": ["--api-key=abc"]}}, ["must not carry secrets"]),
    # A credential given as the value of an ordinary flag, or as a flag: never stored, never echoed.
    (
        "extra-args-token-value",
        {"engine": {"extraArgs": ["--enforce-eager", "hf_AbCdEfGhIjKlMnOpQrStUvWx"]}},
        ["must not carry credentials"],
    ),
    (
        "extra-args-token-flag",
        {"engine": {"extraArgs": ["-hf_AbCdEfGhIjKlMnOpQrStUvWx"]}},
        ["must not carry credentials"],
    ),
    (
        "extra-args-url-userinfo",
        {"engine": {"extraArgs": ["--otlp-traces-endpoint", "http://user:s3cr3t@collector:4317"]}},
        ["must not carry credentials"],
    ),
]

# LoRA adapters: names clients can send, sources on the cache or the hub, vLLM's ranks, unique names that are
# not the base model's.
ADAPTER = {"name": "sql", "source": "/models/adapters/sql"}
INVALID += [
    (
        "adapter-upper-name",
        {"adapters": [{**ADAPTER, "name": "SQL"}]},
        ["spec.adapters[0].name", "should match"],
    ),
    (
        "adapter-source-outside-cache",
        {"adapters": [{**ADAPTER, "source": "/etc/secrets"}]},
        ["spec.adapters[0].source", "should match"],
    ),
    (
        "adapter-source-parent",
        {"adapters": [{**ADAPTER, "source": "/models/../etc"}]},
        ["spec.adapters[0].source", "should match"],
    ),
    ("adapter-rank-too-high", {"adapters": [{**ADAPTER, "rank": 1024}]}, ["spec.adapters[0].rank"]),
    (
        "adapter-twice",
        {"adapters": [ADAPTER, {**ADAPTER, "source": "org/sql"}]},
        ["spec.adapters[1]", "Duplicate"],
    ),
    (
        "adapter-is-the-served-name",
        {"model": {"name": "meta-llama/Llama-3.2-1B-Instruct", "servedName": "sql"}, "adapters": [ADAPTER]},
        ["an adapter's name must differ from the base model's served name"],
    ),
]
# Without servedName the served name is metadata.name: the root rule sees it.
INVALID += [
    ("sql", {"adapters": [ADAPTER]}, ["an adapter's name must differ from the base model's served name"])
]

BAD_NAMES = ["x" * 64, "chat.v2", "1chat", "chat_v2", "Chat"]


@pytest.mark.parametrize("name", BAD_NAMES)
def test_a_name_that_cannot_name_a_service_is_rejected(cluster: Cluster, namespace: str, name: str) -> None:
    done = cluster.apply(manifest(name), namespace)
    assert done.returncode != 0, f"{name} was accepted"
    assert "metadata.name must be a DNS-1035 label" in done.stderr or "metadata.name" in done.stderr, (
        done.stderr
    )


@pytest.mark.parametrize(("name", "spec", "expected"), INVALID, ids=[c[0] for c in INVALID])
def test_invalid_llamaservice_is_rejected(
    cluster: Cluster, namespace: str, name: str, spec: dict[str, Any], expected: list[str]
) -> None:
    body = manifest(name, **spec)
    if spec.get("model", ...) is None:
        del body["spec"]["model"]
    done = cluster.kubectl(
        "apply", "--validate=strict", "-n", namespace, "-f", "-", input_text=json.dumps(body), check=False
    )
    assert done.returncode != 0, f"{name} was accepted"
    for text in expected:
        assert text in done.stderr, f"{name}: {text!r} not in {done.stderr!r}"
    assert "AbCdEfGhIjKl" not in done.stderr and "s3cr3t" not in done.stderr, "a refusal quoted a secret"
    assert cluster.llamaservice(name, namespace) is None


def test_valid_values_are_accepted_and_defaulted(cluster: Cluster, namespace: str) -> None:
    body = manifest(
        "valid",
        accelerator={"type": "a100-80gb", "mig": "1g.10gb"},
        engine={"maxNumSeqs": 64, "gpuMemoryUtilization": 0.85},
        autoscaling={"minReplicas": 1, "maxReplicas": 3},
    )
    done = cluster.apply(body, namespace)
    assert done.returncode == 0, done.stderr
    stored = cluster.llamaservice("valid", namespace)
    assert stored is not None
    spec = stored["spec"]
    assert spec["engine"]["dtype"] == "auto"  # defaults come from the schema
    assert spec["autoscaling"]["slo"]["ttftSeconds"] == 0.5
    assert spec["accelerator"]["count"] == 1
    assert cluster.apply(manifest("auto-words", engine={"maxNumSeqs": "auto"}), namespace).returncode == 0


@pytest.mark.parametrize(
    "example",
    sorted(p.relative_to(repo_root()).as_posix() for p in (repo_root() / "examples").rglob("*.yaml")),
)
def test_every_example_is_accepted_by_the_api_server(cluster: Cluster, namespace: str, example: str) -> None:
    done = cluster.kubectl(
        "apply", "--dry-run=server", "-n", namespace, "-f", str(repo_root() / example), check=False
    )
    assert done.returncode == 0, f"{example}: {done.stderr}"
