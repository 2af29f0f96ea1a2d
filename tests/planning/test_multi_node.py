"""A model bigger than one node: a replica over several nodes (pipeline parallel across them, tensor parallel
within each), chosen by auto only where no single node fits, or asked for with accelerator.nodes."""

from __future__ import annotations

import pytest

from llama_operator.api.spec import LlamaServiceSpec
from llama_operator.catalog.accelerators import MIB
from llama_operator.planning import PlanningError
from llama_operator.planning.inventory import inventory_from_nodes
from tests.planning.builders import gpu_node, plan, spec

LLAMA_405B = "meta-llama/Llama-3.1-405B-Instruct"
LLAMA_8B = "meta-llama/Llama-3.1-8B-Instruct"
H100_NODES = [gpu_node(f"h100-{i}", "NVIDIA-H100-80GB-HBM3", 8) for i in range(4)]


def arg(args: list[str], flag: str) -> str | None:
    return args[args.index(flag) + 1] if flag in args else None


def test_405b_on_h100_nodes_of_eight_is_a_group_of_two_nodes() -> None:
    # 405B in bf16 is ~755 GiB of weights: no node of 8 H100s (8 x 79.6 GiB) holds it.
    with pytest.raises(PlanningError, match="does not fit on 8xh100-80gb"):
        plan(spec({"type": "h100-80gb", "count": 8}, model=LLAMA_405B))
    inventory = inventory_from_nodes(H100_NODES)
    chosen = plan(spec({"type": "auto"}, model=LLAMA_405B), inventory=inventory)
    assert (chosen.accelerator, chosen.count, chosen.nodes) == ("h100-80gb", 8, 2)
    assert arg(chosen.vllm_args, "--tensor-parallel-size") == "8"
    assert arg(chosen.vllm_args, "--pipeline-parallel-size") == "2"
    assert arg(chosen.vllm_args, "--distributed-executor-backend") == "ray"
    # Each pod of the group requests a whole node's GPUs; each GPU holds half the layers' weights.
    assert chosen.resources == {"nvidia.com/gpu": "8"}
    assert chosen.weight_bytes * 16 == pytest.approx(405e9 * 2, rel=0.02)
    assert chosen.memory_bytes == 16 * 81559 * MIB  # the replica's memory: 16 GPUs over 2 nodes
    assert any(
        n.startswith("multi-node: each replica is a LeaderWorkerSet group of 2 pods") for n in chosen.notes
    )
    # Asked for explicitly, the same.
    explicit = plan(
        spec({"type": "h100-80gb", "count": 8, "nodes": 2}, model=LLAMA_405B), inventory=inventory
    )
    assert explicit.vllm_args == chosen.vllm_args and explicit.kv_cache_tokens == chosen.kv_cache_tokens


def test_auto_prefers_one_node_where_one_fits() -> None:
    inventory = inventory_from_nodes(H100_NODES)
    assert plan(spec({"type": "auto"}, model=LLAMA_8B), inventory=inventory).nodes == 1


def test_too_few_nodes_for_a_group_means_no_fit() -> None:
    one_node = inventory_from_nodes(H100_NODES[:1])
    with pytest.raises(PlanningError, match="no accelerator present in the cluster fits"):
        plan(spec({"type": "auto"}, model=LLAMA_405B), inventory=one_node)


def test_nodes_needs_whole_gpus() -> None:
    with pytest.raises(ValueError, match=r"accelerator\.nodes > 1"):
        LlamaServiceSpec.model_validate(
            {"model": {"name": LLAMA_8B}, "accelerator": {"type": "a100-80gb", "mig": "1g.10gb", "nodes": 2}}
        )
    with pytest.raises(ValueError, match=r"accelerator\.nodes > 1"):
        LlamaServiceSpec.model_validate(
            {"model": {"name": LLAMA_8B}, "accelerator": {"type": "cpu", "nodes": 2}}
        )


def test_a_replica_too_big_for_one_node_of_the_spec_gpu_is_offered_nodes() -> None:
    # Issue 43: the refusal named 8xH200 and never accelerator.nodes 2 of the GPU the spec asked for.
    with pytest.raises(PlanningError) as refused:
        plan(spec({"type": "h100-80gb", "count": 8}, model=LLAMA_405B))
    message = str(refused.value)
    hint = "on h100-80gb it fits as accelerator.count 8 with accelerator.nodes 2 (2 nodes of 8xh100-80gb"
    assert hint in message
    assert message.index(hint) < message.index("the smallest catalog option that fits is 8xh200")
    # The offer plans.
    offered = plan(spec({"type": "h100-80gb", "count": 8, "nodes": 2}, model=LLAMA_405B))
    assert (offered.count, offered.nodes) == (8, 2)
    # A MIG slice is never offered nodes.
    with pytest.raises(PlanningError) as slice_refused:
        plan(spec({"type": "a100-80gb", "mig": "1g.10gb"}, model=LLAMA_8B))
    assert "accelerator.nodes" not in str(slice_refused.value)
