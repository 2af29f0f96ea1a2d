"""Mixture-of-experts and vision models (issue 43): Llama 4 Scout and Maverick, Llama 3.2 Vision 11B and 90B in
the catalog, each figure derived from its config.json and checked against its model card; model.architecture
describes experts and a vision encoder; the plan computes a prompt through the active parameters, keeps every
expert in memory, runs whole experts per GPU where they divide, and sizes a request's images."""

from __future__ import annotations

import json
from typing import Any

import pytest

from llama_operator.api.spec import LlamaServiceSpec
from llama_operator.catalog.models import find_model
from llama_operator.catalog.performance import PREFILL_COMPUTE_EFFICIENCY
from llama_operator.planning import PlanningError
from tests.planning.builders import plan

SCOUT = "meta-llama/Llama-4-Scout-17B-16E-Instruct"
MAVERICK = "meta-llama/Llama-4-Maverick-17B-128E-Instruct"
VISION_11B = "meta-llama/Llama-3.2-11B-Vision-Instruct"
VISION_90B = "meta-llama/Llama-3.2-90B-Vision-Instruct"


def service(
    model: dict[str, Any], accelerator: dict[str, Any], engine: dict[str, Any] | None = None
) -> LlamaServiceSpec:
    return LlamaServiceSpec.model_validate(
        {"model": model, "accelerator": accelerator, "engine": engine or {}}
    )


def arg(args: list[str], flag: str) -> str | None:
    return args[args.index(flag) + 1] if flag in args else None


@pytest.mark.parametrize(
    ("name", "total", "active"),
    [
        # Model cards: "17B active, 109B total" (Scout), "17B active, 400B total" (Maverick; the hub counts
        # 402B), Llama 3.2 Vision 10.6B and 88.6B (dense: every parameter active).
        (SCOUT, 109e9, 17e9),
        (MAVERICK, 400e9, 17e9),
        (VISION_11B, 10.6e9, 10.6e9),
        (VISION_90B, 88.6e9, 88.6e9),
    ],
)
def test_the_catalog_figures_agree_with_the_model_cards(name: str, total: float, active: float) -> None:
    known = find_model(name)
    assert known is not None
    assert known.shape.parameters == pytest.approx(total, rel=0.01)
    assert known.shape.compute_parameters == pytest.approx(active, rel=0.02)
    assert known.shape.image_tokens > 0 and 0 < known.shape.vision_parameters < 1e9


def test_a_mixture_of_experts_keeps_every_expert_and_computes_through_the_active_ones() -> None:
    p = plan(service({"name": SCOUT}, {"type": "h100-80gb", "count": 4}))
    shape = find_model(SCOUT).shape  # type: ignore[union-attr]
    assert (
        p.weight_bytes * p.count == shape.parameters * 2
    )  # bf16: all 16 experts resident (per GPU: a quarter)
    # Prefill: 2 FLOPs per active parameter per token over the 4 GPUs' dense FP16 rate.
    assert p.prefill_seconds_per_token == pytest.approx(
        2 * shape.compute_parameters / (4 * 989e12 * PREFILL_COMPUTE_EFFICIENCY), rel=0.01
    )
    # 16 experts over 4 GPUs: whole experts per GPU.
    assert "--enable-expert-parallel" in p.vllm_args
    note = next(n for n in p.notes if n.startswith("mixture of experts: 16 experts, 1 per token"))
    assert "expert parallel: 4 whole experts per GPU" in note
    # The user's own choice stands.
    own = plan(
        service(
            {"name": SCOUT}, {"type": "h100-80gb", "count": 4}, {"extraArgs": ["--no-enable-expert-parallel"]}
        )
    )
    assert own.vllm_args.count("--enable-expert-parallel") == 0


def test_maverick_fits_8_h100s_in_fp8_not_in_bf16() -> None:
    with pytest.raises(PlanningError, match="does not fit on 8xh100-80gb"):
        plan(service({"name": MAVERICK}, {"type": "h100-80gb", "count": 8}))
    p = plan(service({"name": MAVERICK + "-FP8"}, {"type": "h100-80gb", "count": 8}))
    assert p.count == 8 and "--enable-expert-parallel" in p.vllm_args


def test_a_vision_model_limits_images_per_request_and_plans_their_tokens() -> None:
    p = plan(service({"name": VISION_11B}, {"type": "a100-80gb"}))
    assert json.loads(arg(p.vllm_args, "--limit-mm-per-prompt") or "") == {"image": 1}
    assert any(n.startswith("vision: up to 1 image(s) per request") for n in p.notes)
    assert any("Transformers backend" in n for n in p.notes)  # vLLM dropped its own Mllama
    two = plan(service({"name": SCOUT}, {"type": "h100-80gb", "count": 4}, {"maxImagesPerPrompt": 2}))
    assert json.loads(arg(two.vllm_args, "--limit-mm-per-prompt") or "") == {"image": 2}
    assert two.max_model_len >= 2 * 2448
    text_only = plan(service({"name": SCOUT}, {"type": "h100-80gb", "count": 4}, {"maxImagesPerPrompt": 0}))
    assert json.loads(arg(text_only.vllm_args, "--limit-mm-per-prompt") or "") == {"image": 0}


def test_images_are_refused_where_they_do_not_apply_or_fit() -> None:
    with pytest.raises(PlanningError, match=r"engine\.maxImagesPerPrompt is for a vision model"):
        plan(service({"name": "meta-llama/Llama-3.1-8B-Instruct"}, {"type": "l4"}, {"maxImagesPerPrompt": 1}))
    with pytest.raises(PlanningError, match="leaves no room for text beside 2 image"):
        plan(
            service(
                {"name": VISION_11B}, {"type": "a100-80gb"}, {"maxImagesPerPrompt": 2, "maxModelLen": 8192}
            )
        )


def test_a_quantized_vision_checkpoint_keeps_its_encoder_in_16_bits() -> None:
    sixteen = plan(service({"name": SCOUT}, {"type": "h100-80gb", "count": 4}))
    fp8 = plan(
        service(
            {"name": "RedHatAI/Llama-4-Scout-17B-16E-Instruct-FP8-dynamic"}, {"type": "h100-80gb", "count": 4}
        )
    )
    shape = find_model(SCOUT).shape  # type: ignore[union-attr]
    kept = shape.embedding_parameters + shape.vision_parameters  # type: ignore[operator]
    assert fp8.weight_bytes * fp8.count == (shape.parameters - kept) + kept * 2
    assert fp8.weight_bytes < sixteen.weight_bytes * 0.55


def test_the_architecture_describes_a_mixture_of_experts_the_catalog_does_not_know() -> None:
    # Mixtral 8x7B's config.json: 32 layers, 8 KV heads of 128, 46.7 B parameters, 12.9 B active, 8 experts, 2 per token.
    architecture = {
        "layers": 32,
        "kvHeads": 8,
        "headDim": 128,
        "parameters": 46_702_792_704,
        "maxContext": 32768,
        "activeParameters": 12_879_925_248,
        "experts": 8,
        "expertsPerToken": 2,
    }
    p = plan(
        service(
            {"name": "mistralai/Mixtral-8x7B-Instruct-v0.1", "architecture": architecture},
            {"type": "h100-80gb", "count": 2},
        )
    )
    assert p.weight_bytes * p.count == 46_702_792_704 * 2
    assert "--enable-expert-parallel" in p.vllm_args
    dense = plan(
        service(
            {
                "name": "acme/dense",
                "architecture": {
                    **architecture,
                    "activeParameters": None,
                    "experts": None,
                    "expertsPerToken": None,
                },
            },
            {"type": "h100-80gb", "count": 2},
        )
    )
    assert p.prefill_seconds_per_token == pytest.approx(
        dense.prefill_seconds_per_token * 12.88 / 46.70, rel=0.01
    )
    for broken, message in (
        ({"experts": None}, "set both or neither"),
        ({"expertsPerToken": 16}, "at most architecture.experts"),
        ({"activeParameters": 50_000_000_000}, "at most architecture.parameters"),
    ):
        with pytest.raises(ValueError, match=message):
            service({"name": "acme/moe", "architecture": {**architecture, **broken}}, {"type": "h100-80gb"})
