"""LoRA adapters: spec.adapters' validation, the LoRA capacity the planner sizes and the memory it takes."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from llama_operator.api.resource import LlamaService, ObjectMeta
from llama_operator.api.settings import Settings
from llama_operator.api.spec import MAX_ADAPTER_RANK, LlamaServiceSpec
from llama_operator.catalog.models import model_shape
from llama_operator.catalog.vllm_flags import flag_contract
from llama_operator.desired.labels import ADAPTERS_READINESS_GATE
from llama_operator.desired.pod import build_pod_template
from llama_operator.planning import PlanningError
from llama_operator.planning.adapters import (
    allowed_max_lora_ranks,
    lora_bytes_per_slot,
    lora_capacity,
    max_lora_rank_for,
)
from tests.planning.builders import plan

LLAMA_8B = "meta-llama/Llama-3.1-8B-Instruct"
CACHE = {"persistentVolumeClaim": "models"}


def _spec(adapters: list[dict[str, Any]], accelerator: str = "a10g", **model: Any) -> LlamaServiceSpec:
    return LlamaServiceSpec.model_validate(
        {
            "model": {"name": LLAMA_8B, "cache": CACHE, **model},
            "accelerator": {"type": accelerator},
            "adapters": adapters,
        }
    )


def test_the_largest_rank_the_spec_takes_is_vllms() -> None:
    ranks = allowed_max_lora_ranks()
    assert ranks == (
        1,
        8,
        16,
        32,
        64,
        128,
        256,
        320,
        512,
    )  # vllm/config/lora.py MaxLoRARanks, via the contract
    assert ranks[-1] == MAX_ADAPTER_RANK


@pytest.mark.parametrize(
    ("adapter", "match"),
    [
        ({"name": "SQL", "source": "org/sql"}, "name"),
        ({"name": "-sql", "source": "org/sql"}, "name"),
        ({"name": "s" * 64, "source": "org/sql"}, "name"),
        ({"name": "sql", "source": "sql"}, "source"),  # neither a hub id nor a path on the cache
        ({"name": "sql", "source": "/etc/passwd"}, "source"),
        ({"name": "sql", "source": "/models/../etc"}, "source"),
        ({"name": "sql", "source": "--port=1"}, "source"),
        ({"name": "sql", "source": "/models/a,b=c"}, "source"),
        ({"name": "sql", "source": "org/sql", "rank": 0}, "rank"),
        ({"name": "sql", "source": "org/sql", "rank": 513}, "rank"),
    ],
)
def test_bad_adapters_name_the_field(adapter: dict[str, Any], match: str) -> None:
    with pytest.raises(ValidationError, match=match):
        _spec([adapter])


def test_adapter_names_are_unique_and_not_the_served_name() -> None:
    with pytest.raises(ValidationError, match="used twice"):
        _spec([{"name": "sql", "source": "org/a"}, {"name": "sql", "source": "org/b"}])
    with pytest.raises(ValidationError, match="served name"):
        _spec([{"name": "chat", "source": "org/a"}], servedName="chat")
    # Without servedName the served name is metadata.name: the planner sees it ("chat" in builders.plan).
    with pytest.raises(PlanningError, match=r"adapters\[0\].name 'chat' is the base model's served name"):
        plan(_spec([{"name": "chat", "source": "org/a"}]))


def test_a_path_on_the_cache_needs_a_claim() -> None:
    service = LlamaServiceSpec.model_validate(
        {
            "model": {"name": LLAMA_8B},
            "accelerator": {"type": "a10g"},
            "adapters": [{"name": "a", "source": "/models/a"}],
        }
    )
    with pytest.raises(PlanningError, match="persistentVolumeClaim"):
        plan(service)
    # A hub id is downloaded into the cache, whatever the cache is.
    hub = service.model_copy(
        update={"adapters": [service.adapters[0].model_copy(update={"source": "org/a"})]}
    )
    assert "--enable-lora" in plan(hub).vllm_args


@pytest.mark.parametrize(
    ("ranks", "expected"), [([None], 16), ([4], 8), ([8, 16], 16), ([17], 32), ([300], 320), ([1], 1)]
)
def test_max_lora_rank_is_the_next_rank_vllm_takes(ranks: list[int | None], expected: int) -> None:
    service = _spec([{"name": f"a{i}", "source": "org/a", "rank": r} for i, r in enumerate(ranks)])
    assert max_lora_rank_for(service.adapters) == expected
    assert expected in allowed_max_lora_ranks()


@pytest.mark.parametrize(
    ("count", "gpu_slots", "cpu_slots"), [(1, 4, 4), (4, 4, 4), (5, 8, 8), (9, 8, 16), (64, 8, 64)]
)
def test_slots_are_sized_in_steps_so_that_an_added_adapter_keeps_the_plan(
    count: int, gpu_slots: int, cpu_slots: int
) -> None:
    service = _spec([{"name": f"a{i}", "source": "org/a"} for i in range(count)])
    capacity = lora_capacity(service.adapters, model_shape(LLAMA_8B), dtype_bytes=2)
    assert capacity is not None
    assert (capacity.max_loras, capacity.max_cpu_loras) == (gpu_slots, cpu_slots)
    assert capacity.max_cpu_loras >= capacity.max_loras  # vLLM refuses fewer CPU than GPU slots


def test_slot_bytes_from_the_models_shape() -> None:
    # Llama 3.1 8B at rank 16 in 16 bits, by hand: per layer (in + out) of qkv 4096+6144, o 4096+4096,
    # gate_up 4096+28672, down 14336+4096 = 69632; 32 layers; embed_tokens and lm_head 2 x (128256 + 4096).
    expected = 16 * (32 * 69_632 + 2 * (128_256 + 4096)) * 2
    assert lora_bytes_per_slot(model_shape(LLAMA_8B), rank=16, dtype_bytes=2) == expected
    assert 75 * 2**20 < expected < 80 * 2**20


def test_adapters_take_their_slots_from_the_kv_cache_and_status_says_how_much() -> None:
    without = plan(_spec([]))
    with_adapters = plan(
        _spec([{"name": "sql", "source": "org/sql", "rank": 64}, {"name": "doc", "source": "/models/doc"}])
    )
    slot = lora_bytes_per_slot(model_shape(LLAMA_8B), rank=64, dtype_bytes=2)
    assert with_adapters.adapter_bytes == 4 * slot
    assert (with_adapters.max_loras, with_adapters.max_lora_rank, with_adapters.max_cpu_loras) == (4, 64, 4)
    freed_tokens = without.kv_cache_tokens - with_adapters.kv_cache_tokens
    # The KV cache lost the slots' bytes, to the block (16 tokens).
    assert abs(freed_tokens * without.kv_bytes_per_token - 4 * slot) <= 16 * without.kv_bytes_per_token
    assert any("LoRA: 2 adapter(s); 4 slots of rank 64" in note for note in with_adapters.notes)
    assert without.adapter_bytes == without.max_loras == 0
    assert "--enable-lora" not in without.vllm_args
    assert "VLLM_ALLOW_RUNTIME_LORA_UPDATING" not in without.vllm_env


def test_lora_arguments_and_the_runtime_api_switch() -> None:
    planned = plan(_spec([{"name": "sql", "source": "org/sql", "rank": 8}]))
    args = planned.vllm_args
    start = args.index("--enable-lora")
    assert args[start : start + 7] == [
        "--enable-lora",
        "--max-loras",
        "4",
        "--max-lora-rank",
        "8",
        "--max-cpu-loras",
        "4",
    ]
    assert planned.vllm_env["VLLM_ALLOW_RUNTIME_LORA_UPDATING"] == "True"
    # The adapters are loaded at runtime, not named in the arguments: adding one leaves the pod template as is.
    assert "--lora-modules" not in args
    more = plan(
        _spec(
            [{"name": "sql", "source": "org/sql", "rank": 8}, {"name": "doc", "source": "org/doc", "rank": 8}]
        )
    )
    assert more.vllm_args == args


def test_tensor_parallel_divides_half_the_slot_bytes() -> None:
    service = LlamaServiceSpec.model_validate(
        {
            "model": {"name": LLAMA_8B},
            "accelerator": {"type": "h100-80gb", "count": 2},
            "adapters": [{"name": "sql", "source": "org/sql"}],
        }
    )
    planned = plan(service)
    slots = 4 * lora_bytes_per_slot(model_shape(LLAMA_8B), rank=16, dtype_bytes=2)
    assert planned.adapter_bytes == -(-slots * 3 // 4)  # half divided by 2, half whole


def test_on_cpu_the_slots_are_host_memory() -> None:
    without = plan(_spec([], accelerator="cpu"))
    with_adapters = plan(_spec([{"name": "sql", "source": "org/sql"}], accelerator="cpu"))
    assert with_adapters.kv_cache_tokens == without.kv_cache_tokens  # the CPU KV space is the operator's
    assert with_adapters.adapter_bytes > 0
    assert int(with_adapters.memory_request.removesuffix("Gi")) >= int(
        without.memory_request.removesuffix("Gi")
    )


def test_a_model_that_no_longer_fits_says_the_slots_took_the_room() -> None:
    # 8B on a 24 GiB A10G has ~2.9 GiB of KV; 8 slots of rank 512 take ~19 GiB.
    adapters = [{"name": f"a{i}", "source": "org/a", "rank": 512} for i in range(8)]
    with pytest.raises(PlanningError, match="LoRA slots"):
        plan(_spec(adapters))


def test_the_contract_still_knows_the_lora_flags() -> None:
    for name in ("--enable-lora", "--max-loras", "--max-lora-rank", "--max-cpu-loras"):
        assert flag_contract().lookup(name) is not None


def test_adapters_and_an_api_key_are_refused_together() -> None:
    service = LlamaServiceSpec.model_validate(
        {
            "model": {"name": LLAMA_8B},
            "accelerator": {"type": "a10g"},
            "engine": {"apiKeySecretRef": {"name": "key"}},
            "adapters": [{"name": "sql", "source": "org/sql"}],
        }
    )
    with pytest.raises(PlanningError, match=r"apiKeySecretRef.*does not read tenants' Secrets"):
        plan(service)


def test_with_adapters_a_pod_is_ready_only_once_they_are_loaded() -> None:
    with_adapters = _spec([{"name": "sql", "source": "org/sql"}])
    without = _spec([])
    for service, gates in ((with_adapters, [{"conditionType": ADAPTERS_READINESS_GATE}]), (without, None)):
        svc = LlamaService(metadata=ObjectMeta(name="chat", namespace="t", uid="1"), spec=service)
        template = build_pod_template(svc, plan(service), Settings(), pod_monitor=False)
        assert template["spec"].get("readinessGates") == gates
