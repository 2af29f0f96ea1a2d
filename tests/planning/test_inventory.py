"""Node inventory from v1 Node dicts: GPUs, MIG slices in both strategies, CPU nodes, exclusions."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from llama_operator.api.spec import AcceleratorType
from llama_operator.catalog.accelerators import MIB
from llama_operator.planning.inventory import SkippedNode, inventory_from_nodes
from tests.planning.builders import gpu_node, mig_mixed_node, mig_single_node, node

NODE_MANIFESTS = Path(__file__).resolve().parents[2] / "e2e" / "nodes"


def test_full_gpus() -> None:
    inventory = inventory_from_nodes([gpu_node("t4", "Tesla-T4", 2, memory_mib=15360)])
    [offer] = inventory.offers
    assert offer.accelerator == AcceleratorType.T4
    assert (offer.allocatable, offer.resource, offer.mig_profile) == (2, "nvidia.com/gpu", None)
    assert offer.memory_bytes == 15360 * MIB
    assert inventory.gpu_offers(AcceleratorType.T4, min_count=2) == (offer,)
    assert inventory.gpu_offers(AcceleratorType.T4, min_count=3) == ()


def test_mig_mixed() -> None:
    raw = mig_mixed_node("a100", "A100-SXM4-80GB", "1g.10gb", 7)
    raw["metadata"]["labels"]["nvidia.com/mig-1g.10gb.memory"] = "9728"
    inventory = inventory_from_nodes([raw])
    [offer] = inventory.mig_offers(AcceleratorType.A100_80GB, "1g.10gb")
    assert (offer.mig_strategy, offer.resource, offer.allocatable) == ("mixed", "nvidia.com/mig-1g.10gb", 7)
    assert offer.product == offer.parent_product == "A100-SXM4-80GB"
    assert offer.memory_bytes == 9728 * MIB
    assert inventory.gpu_offers(AcceleratorType.A100_80GB) == ()
    assert inventory.mig_offers(AcceleratorType.A100_80GB, "1g.10gb", "single") == ()


def test_mig_single() -> None:
    inventory = inventory_from_nodes([mig_single_node("h100", "NVIDIA-H100-80GB-HBM3", "1g.10gb", 7)])
    [offer] = inventory.offers
    assert (offer.accelerator, offer.mig_profile, offer.mig_strategy) == (
        AcceleratorType.H100_80GB,
        "1g.10gb",
        "single",
    )
    assert offer.resource == "nvidia.com/gpu"
    assert offer.parent_product == "NVIDIA-H100-80GB-HBM3"
    assert inventory.gpu_offers(AcceleratorType.H100_80GB) == ()  # slices are not whole GPUs


@pytest.mark.parametrize("state", ["pending", "rebooting", "failed"])
def test_nodes_mid_mig_reconfiguration_offer_nothing(state: str) -> None:
    for raw in (
        mig_mixed_node("n", "A100-SXM4-80GB", "1g.10gb", 7, state=state),
        mig_single_node("n", "A100-SXM4-40GB", "1g.5gb", 7, state=state),
    ):
        inventory = inventory_from_nodes([raw])
        assert inventory.offers == ()
        assert state in inventory.skipped[0].reason


def test_mig_slices_without_state_label_are_not_offered() -> None:
    raw = mig_mixed_node("n", "A100-SXM4-80GB", "1g.10gb", 7)
    del raw["metadata"]["labels"]["nvidia.com/mig.config.state"]
    inventory = inventory_from_nodes([raw])
    assert inventory.offers == ()
    assert "mig.config.state=success" in inventory.skipped[0].reason


def test_cpu_cordoned_and_unknown_nodes() -> None:
    inventory = inventory_from_nodes(
        [
            node("cpu", allocatable={"cpu": "15890m"}),
            node("cordoned", unschedulable=True),
            gpu_node("v100", "Tesla-V100-SXM2-16GB", 8),
            gpu_node("empty", "Tesla-T4", 0),
            {"kind": "Pod", "metadata": {"name": "not-a-node"}},
        ]
    )
    [cpu] = inventory.cpu_offers()
    assert (cpu.node, cpu.allocatable) == ("cpu", 15)
    reasons = {s.node: s.reason for s in inventory.skipped}
    assert set(reasons) == {"cordoned", "v100", "empty"}
    assert "not in the accelerator catalog" in reasons["v100"]


@pytest.mark.skipif(not NODE_MANIFESTS.is_dir(), reason="e2e node manifests not present")
def test_e2e_node_manifests() -> None:
    nodes = [yaml.safe_load(p.read_text()) for p in sorted(NODE_MANIFESTS.glob("*.yaml"))]
    inventory = inventory_from_nodes(nodes)
    assert inventory.offers
    skipped = {s.node for s in inventory.skipped}
    pending = [
        n["metadata"]["name"]
        for n in nodes
        if n["metadata"]["labels"].get("nvidia.com/mig.config.state") == "pending"
    ]
    assert set(pending) <= skipped
    assert not {o.node for o in inventory.offers} & set(pending)


@pytest.mark.parametrize("count", ["inf", "1e400", "-inf", "nan", "²m", "9" * 400])
def test_an_allocatable_count_that_is_no_whole_number_offers_nothing(count: str) -> None:
    # Hand-written inventories (`plan --nodes`) are not checked by an API server.
    inventory = inventory_from_nodes(
        [node("odd", {"nvidia.com/gpu.product": "Tesla-T4"}, {"nvidia.com/gpu": count})]
    )
    assert inventory.offers == ()
    assert inventory.skipped == (SkippedNode(node="odd", reason="Tesla-T4 with nothing allocatable"),)
