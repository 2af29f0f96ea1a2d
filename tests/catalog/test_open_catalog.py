"""The catalog covers today's NVIDIA datacenter GPUs with stated sources; a platform adds or overrides one
through the operator's configuration (no release); a GPU node that matches nothing is reported."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from llama_operator.api.settings import Settings
from llama_operator.api.spec import MIG_PROFILES_BY_TYPE, AcceleratorType
from llama_operator.catalog import accelerators as catalog_module
from llama_operator.catalog.accelerators import (
    ACCELERATORS,
    BUILTIN_CATALOG,
    GB,
    MIB,
    accelerator_for_product,
    catalog_from_settings,
)
from llama_operator.planning import PlanningConfig, PlanningError
from llama_operator.planning.inventory import inventory_from_nodes
from llama_operator.reconcile.outcome import planning_config
from tests.planning.builders import gpu_node, mig_mixed_node, plan, spec

# (type, product label as GPU Feature Discovery writes it, memory GiB at least, compute capability)
TODAYS_GPUS = [
    ("t4", "Tesla-T4", 14, (7, 5)),
    ("a10", "NVIDIA-A10", 22, (8, 6)),
    ("a10g", "NVIDIA-A10G", 22, (8, 6)),
    ("l4", "NVIDIA-L4", 22, (8, 9)),
    ("l40s", "NVIDIA-L40S", 44, (8, 9)),
    ("a100-40gb", "NVIDIA-A100-SXM4-40GB", 39, (8, 0)),
    ("a100-80gb", "NVIDIA-A100-SXM4-80GB", 79, (8, 0)),
    ("h100-pcie", "NVIDIA-H100-PCIe", 79, (9, 0)),
    ("h100-80gb", "NVIDIA-H100-80GB-HBM3", 79, (9, 0)),
    ("h200", "NVIDIA-H200", 139, (9, 0)),
    ("b200", "NVIDIA-B200", 178, (10, 0)),
]


@pytest.mark.parametrize(("name", "product", "gib", "capability"), TODAYS_GPUS)
def test_todays_gpus_are_in_the_catalog(
    name: str, product: str, gib: int, capability: tuple[int, int]
) -> None:
    matched = accelerator_for_product(product)
    assert matched is not None, f"{product} matches nothing"
    accel, profile = matched
    assert (accel.type, profile) == (name, None)
    assert accel.memory_bytes >= gib * 1024 * MIB
    assert accel.bandwidth_bytes_per_s >= 300 * GB and accel.fp16_dense_tflops > 0
    assert accel.compute_capability is not None
    assert (accel.compute_capability.major, accel.compute_capability.minor) == capability
    assert accel.price_per_hour > 0


def test_every_gpu_states_its_sources() -> None:
    sources = catalog_module.__doc__ or ""
    for accel in ACCELERATORS.values():
        if accel.is_gpu:
            model = accel.display_name.removeprefix("NVIDIA ").split()[0]
            assert model in sources, f"the catalog's sources do not mention the {model}"
    for word in ("nvidia-smi", "data sheet", "MIG user guide", "CUDA", "ESTIMATES"):
        assert word in sources


def test_mig_profiles_of_the_newer_gpus() -> None:
    for accel_type in (AcceleratorType.H100_PCIE, AcceleratorType.H200, AcceleratorType.B200):
        accel = BUILTIN_CATALOG.get(accel_type)
        assert tuple(p.name for p in accel.mig_profiles) == MIG_PROFILES_BY_TYPE[accel_type]
        whole = accel.mig_profiles[-1]
        assert whole.compute_slices == 7 and whole.memory_slices == 8
        assert 0.9 * accel.memory_bytes < whole.memory_bytes < accel.memory_bytes
        for profile in accel.mig_profiles:
            # The memory a slice's name promises, within 10 % (its GB are NVIDIA's rounding).
            promised = int(profile.name.split(".")[1].removesuffix("gb")) * 1024 * MIB
            assert 0.85 * promised < profile.memory_bytes < 1.1 * promised, profile


def test_a_slice_of_h200_plans_on_a_mixed_node() -> None:
    inventory = inventory_from_nodes([mig_mixed_node("h200", "NVIDIA-H200", "1g.18gb", 7)])
    p = plan(spec(), inventory=inventory)
    assert p.display_name == "h200/1g.18gb"
    assert p.resources == {"nvidia.com/mig-1g.18gb": "1"}


@pytest.mark.parametrize("product", ["NVIDIA-H200", "NVIDIA-L40S", "NVIDIA-A10", "NVIDIA-B200"])
def test_auto_uses_the_nodes_once_ignored(product: str) -> None:
    inventory = inventory_from_nodes([gpu_node("gpu-0", product, 1)])
    assert inventory.unknown_gpus == ()
    p = plan(spec(), inventory=inventory)
    assert p.node_selector == {"nvidia.com/gpu.product": product}


# ---- a platform's own accelerators ------------------------------------------------------------------------

H20 = {
    "displayName": "NVIDIA H20 96GB",
    "memoryMiB": 97871,
    "bandwidthGBps": 4000,
    "fp16Tflops": 148,
    "computeCapability": "9.0",
    "pricePerHour": 0.2,
    "productLabels": ["NVIDIA-H20"],
}


def configured(accelerators: dict[str, Any]) -> PlanningConfig:
    return planning_config(Settings.model_validate({"accelerators": accelerators}))


def test_a_platform_adds_a_gpu_that_auto_and_specs_can_use() -> None:
    config = configured({"h20": H20})
    accel = config.catalog.get("h20")
    assert (
        accel.memory_bytes == 97871 * MIB and accel.supports_fp8 and accel.product_labels == ("NVIDIA-H20",)
    )
    nodes = [gpu_node("h20-0", "NVIDIA-H20", 8), gpu_node("t4-0", "Tesla-T4", 1)]
    inventory = inventory_from_nodes(nodes, config.catalog)
    assert inventory.unknown_gpus == ()
    auto = plan(spec(), config=config, inventory=inventory)
    assert auto.accelerator == "h20"  # cheaper than the T4 at the platform's price
    assert auto.node_selector == {"nvidia.com/gpu.product": "NVIDIA-H20"}
    named = plan(spec({"type": "h20", "count": 2}), config=config, inventory=inventory)
    assert named.accelerator == "h20" and named.resources == {"nvidia.com/gpu": "2"}
    # Without the configuration the same spec is a planning error that says how to add it.
    with pytest.raises(PlanningError, match=r"no accelerator 'h20' in the catalog .*config.accelerators"):
        plan(spec({"type": "h20"}), inventory=inventory)


def test_a_platform_overrides_a_builtin_gpu_field_by_field() -> None:
    config = configured({"t4": {"pricePerHour": 9.0, "productLabels": ["Tesla-T4", "Custom-T4"]}})
    t4 = config.catalog.get("t4")
    assert t4.price_per_hour == 9.0 and t4.memory_bytes == BUILTIN_CATALOG.get("t4").memory_bytes
    inventory = inventory_from_nodes(
        [gpu_node("t4", "Custom-T4", 1), gpu_node("l4", "NVIDIA-L4", 1)], config.catalog
    )
    assert plan(spec(), config=config, inventory=inventory).accelerator == "l4"  # the T4 now costs more


def test_a_platform_gpu_with_mig_profiles() -> None:
    config = configured(
        {
            "h20": {
                **H20,
                "migProfiles": [
                    {"name": "1g.12gb", "computeSlices": 1, "memorySlices": 1, "memoryMiB": 11520}
                ],
            }
        }
    )
    inventory = inventory_from_nodes([mig_mixed_node("h20", "NVIDIA-H20", "1g.12gb", 7)], config.catalog)
    p = plan(spec({"type": "h20", "mig": "1g.12gb"}), config=config, inventory=inventory)
    assert p.resources == {"nvidia.com/mig-1g.12gb": "1"}
    with pytest.raises(PlanningError, match=r"no MIG profile '1g\.24gb'"):
        plan(spec({"type": "h20", "mig": "1g.24gb"}), config=config, inventory=inventory)


@pytest.mark.parametrize(
    ("accelerators", "message"),
    [
        ({"h20": {"memoryMiB": 97871}}, "a new accelerator needs bandwidthGBps, fp16Tflops"),
        ({"auto": H20}, "auto: not an accelerator a platform can define"),
        ({"H20": H20}, "accelerators.H20"),
        ({"h20": {**H20, "computeCapability": "nine"}}, "computeCapability"),
    ],
)
def test_an_incomplete_accelerator_is_refused_naming_what_is_missing(
    accelerators: dict[str, Any], message: str
) -> None:
    with pytest.raises(ValidationError, match=message):
        Settings.model_validate({"accelerators": accelerators})


def test_the_builtin_catalog_is_kept_without_configuration() -> None:
    assert catalog_from_settings({}) is BUILTIN_CATALOG


# ---- GPU nodes that match nothing ----------------------------------------------------------------------


def test_an_unknown_gpu_node_is_reported_not_skipped_in_silence() -> None:
    nodes = [
        gpu_node("x-0", "NVIDIA-X1000", 8),
        gpu_node("x-1", "NVIDIA-X1000", 8),
        gpu_node("t4", "Tesla-T4", 1),
    ]
    inventory = inventory_from_nodes(nodes)
    assert inventory.unknown_gpus == (("NVIDIA-X1000", 2),)
    p = plan(spec(), inventory=inventory)
    assert p.accelerator == "t4"
    (note,) = [n for n in p.notes if "NVIDIA-X1000" in n]
    assert "NVIDIA-X1000 (2 nodes) match no accelerator in the catalog" in note
    assert "config.accelerators" in note
    # Nothing else present: the refusal says why the unknown nodes did not count.
    only_unknown = inventory_from_nodes(nodes[:2])
    with pytest.raises(PlanningError, match="NVIDIA-X1000 \\(2 nodes\\) match no accelerator"):
        plan(spec(), inventory=only_unknown)
    # Once the platform defines it, it is no longer unknown.
    config = configured({"x1000": {**H20, "productLabels": ["NVIDIA-X1000"]}})
    assert inventory_from_nodes(nodes, config.catalog).unknown_gpus == ()


@pytest.mark.parametrize("product", ["NVIDIA-GH200-480GB", "NVIDIA-GB200", "NVIDIA-H100-NVL", "NVIDIA-L40"])
def test_a_lookalike_is_unknown_not_guessed(product: str) -> None:
    """A Grace Hopper GH200 is no H200, a GB200 no B200, an H100 NVL (94 GB) no H100: reported, not misplanned."""
    assert accelerator_for_product(product) is None
    assert inventory_from_nodes([gpu_node("n", product, 1)]).unknown_gpus == ((product, 1),)


def test_new_skus_of_known_gpus_are_recognised() -> None:
    assert accelerator_for_product("NVIDIA-H100-PCIe-80GB-SKU2") is not None
    found = accelerator_for_product("NVIDIA-H200-SXM-141GB")
    assert found is not None and found[0].type == "h200"
