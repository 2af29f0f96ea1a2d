"""The image policy: spec.engine.image must start with an allowed prefix, and a prefix cannot be stretched."""

from __future__ import annotations

import pytest

from llama_operator.api.resource import parse_spec
from llama_operator.planning.errors import PlanningError
from llama_operator.planning.images import check_engine_image, image_allowed
from llama_operator.planning.planner import PlanningConfig, plan_service

PREFIXES = ("registry.example.com/vllm", "mirror.example.com/")


@pytest.mark.parametrize(
    ("image", "allowed"),
    [
        ("registry.example.com/vllm:v0.32.0", True),
        ("registry.example.com/vllm@sha256:abc", True),
        ("registry.example.com/vllm/vllm-openai:v0.32.0", True),
        ("registry.example.com/vllm", True),
        ("mirror.example.com/anything:1", True),
        ("registry.example.com/vllm-evil:latest", False),  # not the same repository
        ("registry.example.com/vll", False),
        ("docker.io/vllm/vllm-openai:latest", False),
        ("evil.com/registry.example.com/vllm:1", False),
    ],
)
def test_prefixes(image: str, allowed: bool) -> None:
    assert image_allowed(image, PREFIXES) is allowed


def test_no_policy_allows_any_image() -> None:
    assert image_allowed("anything:latest", ())


def test_a_refused_image_names_the_field_the_policy_and_the_fix() -> None:
    with pytest.raises(PlanningError) as err:
        check_engine_image("docker.io/me/vllm:1", PREFIXES)
    message = str(err.value)
    assert "spec.engine.image 'docker.io/me/vllm:1' is not allowed" in message
    assert "registry.example.com/vllm" in message
    assert "remove engine.image" in message


def test_the_planner_refuses_and_the_default_image_is_always_allowed() -> None:
    config = PlanningConfig(allowed_image_prefixes=PREFIXES)
    refused = parse_spec(
        {
            "model": {"name": "meta-llama/Llama-3.2-1B-Instruct"},
            "accelerator": {"type": "t4"},
            "engine": {"image": "docker.io/me/vllm:1"},
        }
    )
    with pytest.raises(PlanningError, match="image policy"):
        plan_service(refused, name="chat", config=config)
    default = parse_spec(
        {"model": {"name": "meta-llama/Llama-3.2-1B-Instruct"}, "accelerator": {"type": "t4"}}
    )
    assert plan_service(default, name="chat", config=config).image == config.gpu_image
