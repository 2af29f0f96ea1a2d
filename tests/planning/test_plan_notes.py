"""Every plan note is checked against the numbers it quotes (issue 43): a step said to be within a share of
the TTFT objective is; the longest prompt that can meet the TTFT objective is stated, and is what the step
model gives; a context shorter than the model's is said, with both lengths."""

from __future__ import annotations

import re
from typing import Any

import pytest

from llama_operator.api.plan import Plan
from llama_operator.api.spec import LlamaServiceSpec
from llama_operator.catalog.models import model_shape
from llama_operator.catalog.performance import StepModel
from llama_operator.planning import PlanningConfig, plan_service

LLAMA_8B = "meta-llama/Llama-3.1-8B-Instruct"
CASES = [
    (model, accelerator, ttft)
    for model in ("meta-llama/Llama-3.2-1B-Instruct", "meta-llama/Llama-3.2-3B-Instruct", LLAMA_8B)
    for accelerator in ("t4", "l4", "a10g", "a100-80gb", "h100-80gb")
    for ttft in (0.3, 1.0)
    if (model, accelerator) != (LLAMA_8B, "t4")  # 16 GB: it does not fit
]


def plan(model: str, accelerator: str, slo: dict[str, Any] | None) -> Plan:
    body: dict[str, Any] = {"model": {"name": model}, "accelerator": {"type": accelerator}}
    if slo is not None:
        body["autoscaling"] = {"slo": slo}
    return plan_service(LlamaServiceSpec.model_validate(body), name="chat", config=PlanningConfig())


def steps(p: Plan) -> StepModel:
    return StepModel(p.decode_step_seconds, p.decode_seconds_per_context_token, p.prefill_seconds_per_token)


def test_the_l4_chunk_step_is_not_called_within_a_quarter_of_the_ttft_objective() -> None:
    # Measured on main: "estimated at 165 ms, within 25 % of the TTFT objective 0.3s" (25 % is 75 ms).
    p = plan(LLAMA_8B, "l4", {"ttftSeconds": 0.3})
    note = next(n for n in p.notes if n.startswith("maxNumBatchedTokens"))
    assert "within 25%" not in note
    assert "over 25% of the TTFT objective 0.3s (75 ms)" in note


@pytest.mark.parametrize(("model", "accelerator", "ttft"), CASES)
def test_a_step_said_to_be_within_a_share_of_the_ttft_objective_is(
    model: str, accelerator: str, ttft: float
) -> None:
    p = plan(model, accelerator, {"ttftSeconds": ttft})
    for note in p.notes:
        quoted = re.search(
            r"estimated at (\d+) ms, (within|over) (\d+)% of the TTFT objective ([\d.]+)s \((\d+) ms\)", note
        )
        if quoted is None:
            continue
        step_ms, verdict, share, objective, share_ms = quoted.groups()
        assert int(share_ms) == round(int(share) / 100 * float(objective) * 1000)
        assert (int(step_ms) <= int(share_ms)) == (verdict == "within"), note


@pytest.mark.parametrize(("model", "accelerator", "ttft"), CASES)
def test_the_longest_prompt_that_can_meet_the_ttft_objective_is_stated(
    model: str, accelerator: str, ttft: float
) -> None:
    p = plan(model, accelerator, {"ttftSeconds": ttft})
    note = next(
        n for n in p.notes if "can meet the TTFT objective" in n or "cannot meet the TTFT objective" in n
    )
    budget = p.max_num_batched_tokens
    model_steps = steps(p)

    def prefill_seconds(prompt: int) -> float:
        # An idle replica: full steps of the budget, then the rest; each step reads the weights once.
        full, rest = divmod(prompt, budget)
        return full * model_steps.step_seconds(0, 0, budget) + (
            model_steps.step_seconds(0, 0, rest) if rest else 0
        )

    longest = int(re.search(r"~(\d+) tokens", note).group(1))  # type: ignore[union-attr]
    # The plan's coefficients are rounded to 4 significant digits: 0.1 % of slack either way.
    assert prefill_seconds(longest) <= ttft * 1.001
    assert prefill_seconds(longest + max(2, longest // 500)) > ttft
    if longest < p.max_model_len:
        assert note.startswith(f"prompts over ~{longest} tokens cannot meet the TTFT objective {ttft:g}s")
    else:
        assert note.startswith(f"every prompt up to maxModelLen {p.max_model_len} can meet")


def test_the_l4_states_that_long_prompts_cannot_meet_300_ms() -> None:
    p = plan(LLAMA_8B, "l4", {"ttftSeconds": 0.3})
    assert any(
        n.startswith("prompts over ~449 tokens cannot meet the TTFT objective 0.3s") for n in p.notes
    ), p.notes


@pytest.mark.parametrize(("model", "accelerator", "ttft"), CASES)
def test_a_context_shorter_than_the_models_is_said(model: str, accelerator: str, ttft: float) -> None:
    for p in (plan(model, accelerator, None), plan(model, accelerator, {"ttftSeconds": ttft})):
        context = model_shape(model).max_context
        if p.max_model_len < context:
            assert any(
                n.startswith(f"maxModelLen {p.max_model_len}:") and f"model's {context}" in n for n in p.notes
            ), p.notes


def test_replicas_beside_autoscaling_is_said_to_be_ignored() -> None:
    body: dict[str, Any] = {
        "model": {"name": LLAMA_8B},
        "accelerator": {"type": "l4"},
        "replicas": 3,
        "autoscaling": {"minReplicas": 1, "maxReplicas": 4},
    }
    p = plan_service(LlamaServiceSpec.model_validate(body), name="chat", config=PlanningConfig())
    assert (
        "spec.replicas 3 is ignored: autoscaling is enabled and runs between minReplicas 1 and maxReplicas 4; "
        "remove replicas, or set autoscaling.enabled false for a fixed count"
    ) in p.notes
    for quiet in (
        {**body, "autoscaling": {"enabled": False}},
        {k: v for k, v in body.items() if k != "replicas"},
    ):
        p = plan_service(LlamaServiceSpec.model_validate(quiet), name="chat", config=PlanningConfig())
        assert not any(n.startswith("spec.replicas") for n in p.notes)
