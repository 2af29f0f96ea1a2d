"""The accelerator catalog: facts the planner relies on, product-label mapping, MIG profiles."""

from __future__ import annotations

import pytest

from llama_operator.api.spec import MIG_PROFILES_BY_TYPE, AcceleratorType
from llama_operator.catalog.accelerators import (
    ACCELERATORS,
    GB,
    MIB,
    accelerator,
    accelerator_for_product,
    mig_resource_name,
    mig_slice_product,
)


def test_every_concrete_type_is_in_the_catalog() -> None:
    concrete = {t for t in AcceleratorType if t != AcceleratorType.AUTO}
    assert set(ACCELERATORS) == concrete
    with pytest.raises(KeyError, match="no accelerator 'auto'"):
        accelerator(AcceleratorType.AUTO)


def test_mig_profiles_match_the_api_contract() -> None:
    for accel_type, names in MIG_PROFILES_BY_TYPE.items():
        assert tuple(p.name for p in accelerator(accel_type).mig_profiles) == names


@pytest.mark.parametrize(
    ("accel_type", "bf16", "fp8", "fa2"),
    [
        (AcceleratorType.T4, False, False, False),
        (AcceleratorType.A10G, True, False, True),
        (AcceleratorType.L4, True, True, True),
        (AcceleratorType.A100_40GB, True, False, True),
        (AcceleratorType.A100_80GB, True, False, True),
        (AcceleratorType.H100_80GB, True, True, True),
    ],
)
def test_capabilities(accel_type: AcceleratorType, bf16: bool, fp8: bool, fa2: bool) -> None:
    accel = accelerator(accel_type)
    assert (accel.supports_bf16, accel.supports_fp8, accel.supports_flash_attention_2) == (bf16, fp8, fa2)


def test_design_brief_facts() -> None:
    t4 = accelerator("t4")
    assert str(t4.compute_capability) == "sm_75"
    assert t4.bandwidth_bytes_per_s == 320 * GB
    a10g = accelerator("a10g")
    assert str(a10g.compute_capability) == "sm_86"
    assert a10g.bandwidth_bytes_per_s == 600 * GB


def test_mig_slice_fractions_and_bandwidth() -> None:
    a100 = accelerator("a100-80gb")
    small = a100.mig_profile("1g.10gb")
    assert small.sm_fraction == pytest.approx(1 / 7)
    assert small.memory_fraction == pytest.approx(1 / 8)
    # Design brief: A100-80 1g.10gb ~255 GB/s, 3g.40gb ~1020 GB/s.
    assert a100.slice_bandwidth(small) / GB == pytest.approx(255, rel=0.01)
    assert a100.slice_bandwidth(a100.mig_profile("3g.40gb")) / GB == pytest.approx(1020, rel=0.01)
    # 1g.20gb is bound by memory slices: only four fit on one GPU.
    assert a100.mig_profile("1g.20gb").gpu_fraction == pytest.approx(2 / 8)
    assert small.memory_bytes == 9728 * MIB
    with pytest.raises(KeyError, match="no MIG profile"):
        a100.mig_profile("1g.5gb")


@pytest.mark.parametrize(
    ("label", "accel_type", "profile"),
    [
        ("Tesla-T4", AcceleratorType.T4, None),
        ("NVIDIA-A10G", AcceleratorType.A10G, None),
        ("NVIDIA-L4", AcceleratorType.L4, None),
        ("A100-SXM4-80GB", AcceleratorType.A100_80GB, None),
        ("NVIDIA-A100-80GB-PCIe", AcceleratorType.A100_80GB, None),
        ("NVIDIA-A100-SXM4-80GB", AcceleratorType.A100_80GB, None),
        ("NVIDIA-A100-SXM4-40GB", AcceleratorType.A100_40GB, None),
        ("NVIDIA-H100-80GB-HBM3", AcceleratorType.H100_80GB, None),
        ("NVIDIA-H100-PCIe", AcceleratorType.H100_PCIE, None),
        ("A100-SXM4-40GB-MIG-1g.5gb", AcceleratorType.A100_40GB, "1g.5gb"),
        ("NVIDIA-H100-80GB-HBM3-MIG-1g.10gb", AcceleratorType.H100_80GB, "1g.10gb"),
    ],
)
def test_product_labels(label: str, accel_type: AcceleratorType, profile: str | None) -> None:
    found = accelerator_for_product(label)
    assert found is not None
    assert (found[0].type, found[1]) == (accel_type, profile)


@pytest.mark.parametrize("label", ["Tesla-V100-SXM2-16GB", "NVIDIA-H100-NVL", "A100-SXM4-40GB-MIG-9g.99gb"])
def test_unknown_products(label: str) -> None:
    assert accelerator_for_product(label) is None


def test_resource_and_slice_product_names() -> None:
    assert mig_resource_name("1g.10gb") == "nvidia.com/mig-1g.10gb"
    assert mig_slice_product("A100-SXM4-40GB", "1g.5gb") == "A100-SXM4-40GB-MIG-1g.5gb"


def test_canonical_products_are_recognised() -> None:
    for accel in ACCELERATORS.values():
        if accel.is_gpu:
            found = accelerator_for_product(accel.canonical_product)
            assert found is not None
            assert found[0] is accel
