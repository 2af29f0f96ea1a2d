"""Validation of a user's manifest: errors name the field and say how to fix it."""

from __future__ import annotations

from typing import Any

import pytest

from llama_operator.api.resource import InvalidSpecError, parse_llamaservice, parse_metadata, parse_spec
from llama_operator.api.spec import AcceleratorType, LlamaServiceSpec


def manifest(**spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "serving.llama-operator.dev/v1alpha1",
        "kind": "LlamaService",
        "metadata": {"name": "chat", "namespace": "team-a"},
        "spec": {"model": {"name": "meta-llama/Llama-3.2-1B-Instruct"}, **spec},
    }


def test_defaults() -> None:
    svc = parse_llamaservice(manifest())
    assert svc.spec.accelerator.type is AcceleratorType.AUTO
    assert svc.spec.engine.max_num_seqs == "auto"
    assert svc.spec.engine.gpu_memory_utilization is None
    assert svc.spec.engine.prefix_caching is True
    assert svc.spec.replicas == 1 and not svc.spec.autoscaling_enabled


def test_issue_example_parses() -> None:
    svc = parse_llamaservice(
        manifest(
            accelerator={"type": "a100-80gb", "mig": "1g.10gb", "count": 1},
            engine={
                "dtype": "auto",
                "quantization": "none",
                "maxModelLen": 8192,
                "maxNumSeqs": "auto",
                "gpuMemoryUtilization": "auto",
                "prefixCaching": True,
                "extraArgs": [],
            },
            autoscaling={
                "enabled": True,
                "minReplicas": 1,
                "maxReplicas": 8,
                "slo": {"ttftSeconds": 0.5, "percentile": 95, "queueDepthPerReplica": 4},
            },
        )
    )
    assert svc.spec.autoscaling_enabled
    assert svc.spec.accelerator.mig == "1g.10gb"


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        (
            {"autoscaling": {"minReplicas": 3, "maxReplicas": 2}},
            "spec.autoscaling: autoscaling.minReplicas (3)",
        ),
        ({"accelerator": {"type": "t4", "mig": "1g.10gb"}}, "accelerator.mig is only valid on"),
        ({"accelerator": {"type": "a100-40gb", "mig": "1g.10gb"}}, "use one of 1g.5gb"),
        ({"accelerator": {"type": "a100-80gb", "mig": "1g.10gb", "count": 2}}, "count must be 1 with a MIG"),
        (
            {"accelerator": {"type": "TPU_v5"}},
            "spec.accelerator.type",
        ),  # not a name: "tpu" is one (planning refuses it)
        ({"autoscaling": {"slo": {"ttftSeconds": -1}}}, "spec.autoscaling.slo.ttftSeconds"),
        # Objectives meant in milliseconds (issue 43: ttftSeconds 500 was accepted).
        (
            {"autoscaling": {"slo": {"ttftSeconds": 500}}},
            "autoscaling.slo.ttftSeconds is in seconds and at most 60: an objective in milliseconds is "
            "written divided by 1000 (0.5 for 500 ms)",
        ),
        ({"autoscaling": {"slo": {"ttftSeconds": 61}}}, "autoscaling.slo.ttftSeconds is in seconds"),
        (
            {"autoscaling": {"slo": {"tpotSeconds": 40}}},
            "autoscaling.slo.tpotSeconds is in seconds and at most 5",
        ),
        ({"engine": {"maxNumSeqs": 0}}, "maxNumSeqs must be 'auto' or between 1 and 4096"),
        (
            {"engine": {"gpuMemoryUtilization": 1.5}},
            "spec.engine.gpuMemoryUtilization: Input should be less than or equal to 0.98",
        ),
        ({"engine": {"bogus": 1}}, "spec.engine.bogus"),
    ],
)
def test_invalid_specs_name_the_field(spec: dict[str, Any], expected: str) -> None:
    with pytest.raises(InvalidSpecError) as err:
        parse_llamaservice(manifest(**spec))
    assert expected in str(err.value)


def test_model_is_required() -> None:
    with pytest.raises(InvalidSpecError, match=r"spec\.model: Field required"):
        parse_spec({})


@pytest.mark.parametrize(
    "name",
    ["x" * 64, "chat.v2", "1chat", "Chat", "chat-", "-chat", "chat_v2", ""],
)
def test_names_that_cannot_name_a_service_are_refused(name: str) -> None:
    doc = manifest()
    doc["metadata"]["name"] = name
    with pytest.raises(InvalidSpecError, match=r"metadata\.name must be a DNS-1035 label"):
        parse_llamaservice(doc) if name else parse_metadata(doc["metadata"])


@pytest.mark.parametrize("name", ["a", "chat", "x" * 63, "llama-3-2-1b"])
def test_dns_1035_names_are_accepted(name: str) -> None:
    doc = manifest()
    doc["metadata"]["name"] = name
    assert parse_llamaservice(doc).metadata.name == name


@pytest.mark.parametrize("size", ["lots", "0", "0Gi", "-1Gi", "20 Gi", "1.5.Gi"])
def test_cache_size_limit_must_be_a_positive_quantity(size: str) -> None:
    with pytest.raises(
        InvalidSpecError, match=r"spec.model.cache.sizeLimit: .* not a positive Kubernetes quantity"
    ):
        parse_llamaservice(manifest(model={"name": "x/y", "cache": {"sizeLimit": size}}))


@pytest.mark.parametrize("size", ["20Gi", "500M", "1e9", "0.5Ti"])
def test_cache_size_limit_quantities(size: str) -> None:
    svc = parse_llamaservice(manifest(model={"name": "x/y", "cache": {"sizeLimit": size}}))
    assert svc.spec.model.cache is not None and svc.spec.model.cache.size_limit == size


def test_gpu_memory_utilization_auto_still_reads_as_unset() -> None:
    svc = parse_llamaservice(manifest(engine={"gpuMemoryUtilization": "auto"}))
    assert svc.spec.engine.gpu_memory_utilization is None


@pytest.mark.parametrize(
    "name",
    [
        "/etc",
        "/proc/self/root",
        "file:///etc/passwd",
        "/models/../etc",
        "meta-llama/x\n",
        "a\x00b",
        "a/b/c",
        "~/x",
    ],
)
def test_a_model_name_is_a_hub_id_or_a_cache_path(name: str) -> None:
    # Issue 43: these were accepted once model.architecture was set.
    body = {
        "model": {
            "name": name,
            "architecture": {
                "layers": 16,
                "kvHeads": 8,
                "headDim": 64,
                "parameters": 1235814400,
                "maxContext": 131072,
            },
        }
    }
    with pytest.raises(ValueError, match=r"model\.name must be a Hugging Face hub id") as refused:
        LlamaServiceSpec.model_validate(body)
    message = refused.value.errors()[0]["msg"]  # type: ignore[attr-defined]
    assert name not in message  # the rule, not the value quoted back
    for fine in ("gpt2", "meta-llama/Llama-3.2-1B-Instruct", "/models/tiny", "/models/org/model-v1.5/"):
        LlamaServiceSpec.model_validate({**body, "model": {**body["model"], "name": fine}})
