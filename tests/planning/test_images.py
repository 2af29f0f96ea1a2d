"""The image policy: spec.engine.image must start with an allowed prefix, and a prefix cannot be stretched."""

from __future__ import annotations

import pytest

from llama_operator.api.resource import parse_spec
from llama_operator.planning.config import PlanningConfig
from llama_operator.planning.errors import PlanningError
from llama_operator.planning.images import (
    ImageReference,
    check_engine_image,
    image_allowed,
    parse_image_reference,
)
from llama_operator.planning.planner import plan_service

PREFIXES = ("registry.example.com/vllm", "mirror.example.com/")


@pytest.mark.parametrize(
    ("image", "allowed"),
    [
        ("registry.example.com/vllm:v0.32.0", True),
        ("registry.example.com/vllm@sha256:" + "a" * 64, True),
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
    assert "spec.engine.image is not allowed" in message
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


@pytest.mark.parametrize(
    ("image", "prefixes", "allowed"),
    [
        # Issue 24: a prefix string match let a different registry (or a port of it) through.
        ("registry.example.com:5000/evil", ("registry.example.com",), False),
        ("vllm:5000/evil", ("vllm",), False),
        ("registry.example.com.evil.com/vllm", ("registry.example.com",), False),
        ("REGISTRY.example.com/vllm:1", ("registry.example.com",), True),  # hosts are case-insensitive
        ("registry.example.com/team/vllm:1", ("registry.example.com",), True),
        ("registry.example.com:5000/team/vllm:1", ("registry.example.com:5000",), True),
        ("registry.example.com:5000/team/vllm:1", ("registry.example.com:5000/team",), True),
        ("registry.example.com:5001/team/vllm:1", ("registry.example.com:5000/team",), False),
        # Docker Hub: no registry means docker.io, whatever alias the prefix or the image uses.
        ("vllm/vllm-openai:v0.32.0", ("vllm",), True),
        ("vllm/vllm-openai:v0.32.0", ("docker.io/vllm",), True),
        ("index.docker.io/vllm/vllm-openai:v0.32.0", ("vllm/",), True),
        ("docker.io/vllm-evil/x:1", ("vllm",), False),
        ("ubuntu:22.04", ("ubuntu",), True),  # library/ubuntu
        ("ubuntu:22.04", ("docker.io/library/ubuntu",), True),
        ("localhost/vllm:1", ("vllm",), False),
        # An exact reference as the prefix: that tag, or that digest, only.
        (
            "registry.example.com/vllm/vllm-openai:v0.32.0",
            ("registry.example.com/vllm/vllm-openai:v0.32.0",),
            True,
        ),
        (
            "registry.example.com/vllm/vllm-openai:latest",
            ("registry.example.com/vllm/vllm-openai:v0.32.0",),
            False,
        ),
        (
            "registry.example.com/vllm/vllm-openai@sha256:" + "b" * 64,
            ("registry.example.com/vllm/vllm-openai@sha256:" + "b" * 64,),
            True,
        ),
        (
            "registry.example.com/vllm/vllm-openai@sha256:" + "c" * 64,
            ("registry.example.com/vllm/vllm-openai@sha256:" + "b" * 64,),
            False,
        ),
        # A prefix ending in ':' or '@': that repository with any tag or digest, nothing under it.
        ("registry.example.com/vllm:v1", ("registry.example.com/vllm:",), True),
        ("registry.example.com/vllm@sha256:" + "e" * 64, ("registry.example.com/vllm@",), True),
        ("registry.example.com/vllm/other:1", ("registry.example.com/vllm:",), False),
        ("registry.example.com/vllm-evil:1", ("registry.example.com/vllm:",), False),
        # Not references at all: admitted by no policy.
        ("registry.example.com/Vllm:1", ("registry.example.com",), False),
        ("registry.example.com/vllm:bad tag", ("registry.example.com",), False),
        ("registry.example.com/vllm@sha256:short", ("registry.example.com",), False),
        ("registry.example.com//vllm", ("registry.example.com",), False),
    ],
)
def test_references_are_parsed_before_the_policy_compares(
    image: str, prefixes: tuple[str, ...], allowed: bool
) -> None:
    assert image_allowed(image, prefixes) is allowed


@pytest.mark.parametrize(
    ("image", "part"),
    [
        ("Registry.example.com/UPPER:1", "repository path"),
        ("vllm:has space", "white space"),
        ("vllm@md5:xyz", "digest"),
        ("vllm:" + "t" * 200, "tag"),
        ("bad_host:99/x", "registry host"),
    ],
)
def test_an_invalid_reference_is_refused_naming_the_part_not_the_text(image: str, part: str) -> None:
    with pytest.raises(PlanningError, match="not a valid image reference") as error:
        check_engine_image(image, ())
    assert part in str(error.value)
    assert image not in str(error.value)


def test_parsing_normalises_docker_hub() -> None:
    reference = parse_image_reference("registry-1.docker.io/ubuntu:22.04@sha256:" + "d" * 64)
    assert reference == ImageReference(
        host="docker.io", path=("library", "ubuntu"), tag="22.04", digest="sha256:" + "d" * 64
    )
    assert parse_image_reference("[::1]:5000/a/b").host == "[::1]:5000"
