"""Tensor parallel's cost: two all-reduces per layer per step over the GPUs' link (NVLink or PCIe), so
`auto` buys a replica several GPUs only where their step-time gain pays for them, and a TPOT objective no
accelerator reaches is reported as such, not as a memory misfit."""

from __future__ import annotations

import re
from dataclasses import asdict
from pathlib import Path
from typing import Any

import pytest
import yaml

from llama_operator.api.spec import LlamaServiceSpec
from llama_operator.catalog.accelerators import BUILTIN_CATALOG
from llama_operator.catalog.performance import step_model
from llama_operator.planning import PlanningConfig, PlanningError, plan_service
from llama_operator.planning.inventory import inventory_from_nodes
from llama_operator.planning.tuning import MIN_TPOT_CHUNK_TOKENS, TPOT_CHUNK_SHARE
from tests.llama_1b import llama_1b_hardware
from tests.planning.builders import LLAMA_1B
from tests.planning.test_tpot_floor import eight_gpu_node

NODES = Path(__file__).parents[2] / "e2e" / "nodes"


def spec(tpot: float, accelerator: dict[str, Any] | None = None) -> LlamaServiceSpec:
    return LlamaServiceSpec.model_validate(
        {
            "model": {"name": LLAMA_1B},
            "accelerator": accelerator or {"type": "auto"},
            "autoscaling": {"slo": {"ttftSeconds": 1.0, "tpotSeconds": tpot}},
        }
    )


def llama_1b_on(accelerator: str, tp: int) -> Any:
    accel = BUILTIN_CATALOG.get(accelerator)
    return step_model(
        **asdict(llama_1b_hardware(accelerator, tp)),
        tensor_parallel=tp,
        layers=16,
        hidden_size=2048,
        link_bytes_per_s=accel.interconnect.link_bytes_per_s,
        all_reduce_latency_seconds=accel.interconnect.all_reduce_latency_seconds,
    )


def test_one_gpu_pays_no_all_reduce_and_several_pay_per_layer_and_per_token() -> None:
    one = llama_1b_on("l4", 1)
    assert one.seconds_per_step_token == 0.0
    eight = llama_1b_on("l4", 8)
    # 32 calls of ~30 us over PCIe, on top of the weights read at 8x the bandwidth.
    eight_without_links = 0.004 + 2.47e9 / (8 * 300e9 * 0.75)
    assert eight.weight_read_seconds == pytest.approx(eight_without_links + 32 * 30e-6)
    # Each token of a step moves 2 x 16 x 2(tp-1)/tp x 2048 x 2 bytes over 32 GB/s.
    assert eight.seconds_per_step_token == pytest.approx(32 * 1.75 * 4096 / 32e9)
    assert (
        eight.step_seconds(64, 2048, 256)
        > eight.step_seconds(64, 2048) + 256 * eight.seconds_per_prefill_token
    )


def test_nvlink_all_reduces_cost_less_than_pcie() -> None:
    over_nvlink = llama_1b_on("a100-80gb", 4)
    over_pcie = llama_1b_on("l40s", 4)
    assert over_nvlink.seconds_per_step_token < over_pcie.seconds_per_step_token / 5
    assert BUILTIN_CATALOG.get("h100-80gb").interconnect.name.startswith("NVLink")
    assert BUILTIN_CATALOG.get("l4").interconnect.name.startswith("PCIe")


def test_auto_does_not_buy_eight_l4s_for_a_1b_model_at_a_6ms_tpot() -> None:
    # Once: 8xl4 at tensor parallel 8, the L4s' bandwidth summed with no all-reduce cost.
    chosen = plan_service(spec(0.006), name="chat", config=PlanningConfig())
    assert (chosen.accelerator, chosen.count) != ("l4", 8)


def test_a_tensor_parallel_replica_is_chosen_only_where_its_tokens_cost_less() -> None:
    # Its extra GPUs pay where the replica serves a token within the objective for less than any other option
    # (issue 43: auto ranks by cost per served token); the plan names the runner-up and what it costs more.
    chosen = plan_service(spec(0.006), name="chat", config=PlanningConfig())
    best = next(n for n in chosen.notes if n.startswith(f"auto: {chosen.display_name} is the option"))
    assert "per million tokens" in best
    runner_up = next(n for n in chosen.notes if n.startswith("auto: runner-up"))
    assert "% more per token" in runner_up


def test_an_unreachable_tpot_names_the_field_the_best_tpot_and_the_fix() -> None:
    # The local cluster's nodes: T4s, A10Gs, MIG slices and CPUs, none fast enough for 6 ms.
    inventory = inventory_from_nodes([yaml.safe_load(p.read_text()) for p in sorted(NODES.glob("*.yaml"))])
    config = PlanningConfig()
    with pytest.raises(PlanningError) as refused:
        plan_service(spec(0.006), name="chat", config=config, inventory=inventory)
    message = str(refused.value)
    assert "autoscaling.slo.tpotSeconds 0.006 cannot be met" in message
    assert "best achievable TPOT" in message and "raise autoscaling.slo.tpotSeconds to at least" in message
    assert "smallest catalog option that fits" not in message


def test_tensor_parallel_for_memory_is_unchanged_without_a_tpot() -> None:
    body = {"model": {"name": LLAMA_1B}, "accelerator": {"type": "auto"}}
    chosen = plan_service(LlamaServiceSpec.model_validate(body), name="chat", config=PlanningConfig())
    assert chosen.count == 1


def test_a_tensor_parallel_prompt_chunk_takes_its_share_of_the_objective_all_reduces_included() -> None:
    # Each prompt token of a step also moves its activations through the all-reduces: sized on its compute
    # alone, the chunk took nearly all of the objective's slack and left a decode batch of 3 to 8.
    for tpot in (0.008, 0.01, 0.012, 0.015):
        chosen = plan_service(
            spec(tpot), name="chat", config=PlanningConfig(), inventory=eight_gpu_node("l4")
        )
        assert chosen.accelerator == "l4" and chosen.count > 1, chosen.display_name
        assert any(f"within the TPOT objective {tpot:g}s" in n for n in chosen.notes), chosen.notes
        steps = llama_1b_on("l4", chosen.count)
        assert steps.seconds_per_step_token > 0
        assert steps.weight_read_seconds == pytest.approx(chosen.decode_step_seconds, rel=1e-3)
        why = next(n for n in chosen.notes if n.startswith("maxNumSeqs"))
        found = re.search(r"beside a (\d+)-token prompt chunk", why)
        assert found, why
        chunk = int(found.group(1))
        slack = tpot - steps.step_seconds(1, 2048)
        assert (
            chunk == MIN_TPOT_CHUNK_TOKENS
            or chunk * steps.seconds_per_chunk_token <= TPOT_CHUNK_SHARE * slack
        )
        assert steps.step_seconds(chosen.max_num_seqs, 2048, chunk) <= tpot
