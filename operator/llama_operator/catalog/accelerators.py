"""The accelerators the operator knows: the facts the planner sizes vLLM with.

Sources:
- memory: the total `nvidia-smi` reports, which is what the GPU Operator publishes as
  `nvidia.com/gpu.memory` (MiB) and what vLLM's `--gpu-memory-utilization` is a fraction of;
- bandwidth, dense FP16 tensor TFLOPS: NVIDIA data sheets (T4, A10, L4, A100, H100 SXM);
  AWS's A10G is an A10 variant (600 GB/s, sm_86);
- compute capability: NVIDIA's CUDA GPU list; bf16 and FlashAttention-2 need sm_80,
  FP8 tensor cores sm_89 (Ada) or sm_90 (Hopper);
- MIG profiles: NVIDIA's MIG user guide (profile names, compute slices g/7, memory slices /8);
  slice memory as GPU Feature Discovery labels it (`nvidia.com/mig-<profile>.memory`, MiB;
  seen on real nodes: A100-80GB 1g.10gb 9728, H100 1g.10gb 9984), the other profiles scaled
  from the same guide;
- price: on-demand list price of ONE GPU per hour in AWS us-east-1 (2024), the instance price
  divided by its GPU count: g4dn.xlarge (T4) $0.526, g5.xlarge (A10G) $1.006, g6.xlarge (L4)
  $0.805, p4d.24xlarge (8x A100-40GB) $32.77, p4de.24xlarge (8x A100-80GB) $40.97,
  p5.48xlarge (8x H100) $98.32. A CPU replica is priced as a c7i.2xlarge (8 vCPU, 16 GiB)
  $0.357. Only the ratios matter; operator configuration overrides them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from llama_operator.api.spec import MIG_PROFILES_BY_TYPE, AcceleratorType

MIB = 1024 * 1024
GIB = 1024 * MIB
GB = 1_000_000_000

# Fractions of a MIG-capable GPU: 7 compute slices, 8 memory slices (MIG user guide).
COMPUTE_SLICES_PER_GPU = 7
MEMORY_SLICES_PER_GPU = 8


@dataclass(frozen=True)
class ComputeCapability:
    """CUDA compute capability, e.g. (7, 5) for sm_75."""

    major: int
    minor: int

    def at_least(self, major: int, minor: int) -> bool:
        return (self.major, self.minor) >= (major, minor)

    def __str__(self) -> str:
        return f"sm_{self.major}{self.minor}"


# Capability thresholds the planner checks.
BF16_MIN_CAPABILITY = ComputeCapability(8, 0)
FLASH_ATTENTION_2_MIN_CAPABILITY = ComputeCapability(8, 0)
FP8_MIN_CAPABILITY = ComputeCapability(8, 9)


@dataclass(frozen=True)
class MigProfile:
    """One MIG slice profile of a GPU, e.g. 1g.10gb of an A100 80GB."""

    name: str
    compute_slices: int
    memory_slices: int
    memory_bytes: int

    @property
    def sm_fraction(self) -> float:
        return self.compute_slices / COMPUTE_SLICES_PER_GPU

    @property
    def memory_fraction(self) -> float:
        return self.memory_slices / MEMORY_SLICES_PER_GPU

    @property
    def gpu_fraction(self) -> float:
        """Share of the GPU a slice blocks: the scarcer of its compute and memory slices.

        Seven 1g.10gb fit on an A100 (1/7), but only four 1g.20gb (memory-bound, 2/8).
        """
        return max(self.sm_fraction, self.memory_fraction)


@dataclass(frozen=True)
class Accelerator:
    """One accelerator type of the catalog."""

    type: AcceleratorType
    display_name: str
    memory_bytes: int
    bandwidth_bytes_per_s: float
    fp16_dense_tflops: float
    compute_capability: ComputeCapability | None  # None for cpu
    price_per_hour: float
    # `nvidia.com/gpu.product` values this GPU is labelled with (GFD writes NVML's name with spaces as
    # dashes; newer drivers prefix "NVIDIA"). The first is the canonical one, used without an inventory.
    product_labels: tuple[str, ...] = ()
    mig_profiles: tuple[MigProfile, ...] = ()

    @property
    def is_gpu(self) -> bool:
        return self.compute_capability is not None

    @property
    def supports_bf16(self) -> bool:
        # vLLM's CUDA platform: bfloat16 from Ampere (sm_80); the CPU build runs bfloat16 too.
        return self.compute_capability is None or self.compute_capability.at_least(8, 0)

    @property
    def supports_fp8(self) -> bool:
        return self.compute_capability is not None and self.compute_capability.at_least(8, 9)

    @property
    def supports_flash_attention_2(self) -> bool:
        return self.compute_capability is not None and self.compute_capability.at_least(8, 0)

    @property
    def canonical_product(self) -> str:
        return self.product_labels[0] if self.product_labels else ""

    def mig_profile(self, name: str) -> MigProfile:
        for profile in self.mig_profiles:
            if profile.name == name:
                return profile
        known = ", ".join(p.name for p in self.mig_profiles) or "none"
        raise KeyError(f"{self.type.value} has no MIG profile {name!r} (profiles: {known})")

    def slice_bandwidth(self, profile: MigProfile) -> float:
        # Memory bandwidth follows the memory slices a profile owns.
        return self.bandwidth_bytes_per_s * profile.memory_fraction

    def slice_tflops(self, profile: MigProfile) -> float:
        return self.fp16_dense_tflops * profile.sm_fraction


def _mig(name: str, compute: int, memory: int, mib: int) -> MigProfile:
    return MigProfile(name=name, compute_slices=compute, memory_slices=memory, memory_bytes=mib * MIB)


_A100_40GB_MIG = (
    _mig("1g.5gb", 1, 1, 4864),
    _mig("2g.10gb", 2, 2, 9856),
    _mig("3g.20gb", 3, 4, 19968),
    _mig("4g.20gb", 4, 4, 19968),
    _mig("7g.40gb", 7, 8, 40192),
)
_A100_80GB_MIG = (
    _mig("1g.10gb", 1, 1, 9728),
    _mig("1g.20gb", 1, 2, 19968),
    _mig("2g.20gb", 2, 2, 19968),
    _mig("3g.40gb", 3, 4, 40192),
    _mig("4g.40gb", 4, 4, 40192),
    _mig("7g.80gb", 7, 8, 80384),
)
_H100_80GB_MIG = (
    _mig("1g.10gb", 1, 1, 9984),
    _mig("1g.20gb", 1, 2, 20096),
    _mig("2g.20gb", 2, 2, 20096),
    _mig("3g.40gb", 3, 4, 40320),
    _mig("4g.40gb", 4, 4, 40320),
    _mig("7g.80gb", 7, 8, 80768),
)

ACCELERATORS: Mapping[AcceleratorType, Accelerator] = {
    a.type: a
    for a in (
        Accelerator(
            type=AcceleratorType.T4,
            display_name="NVIDIA T4 16GB",
            memory_bytes=15360 * MIB,
            bandwidth_bytes_per_s=320 * GB,
            fp16_dense_tflops=65.0,
            compute_capability=ComputeCapability(7, 5),
            price_per_hour=0.526,
            product_labels=("Tesla-T4", "NVIDIA-Tesla-T4", "NVIDIA-T4"),
        ),
        Accelerator(
            type=AcceleratorType.A10G,
            display_name="NVIDIA A10G 24GB",
            memory_bytes=23028 * MIB,
            bandwidth_bytes_per_s=600 * GB,
            fp16_dense_tflops=70.0,
            compute_capability=ComputeCapability(8, 6),
            price_per_hour=1.006,
            product_labels=("NVIDIA-A10G",),
        ),
        Accelerator(
            type=AcceleratorType.L4,
            display_name="NVIDIA L4 24GB",
            memory_bytes=23034 * MIB,
            bandwidth_bytes_per_s=300 * GB,
            fp16_dense_tflops=121.0,
            compute_capability=ComputeCapability(8, 9),
            price_per_hour=0.805,
            product_labels=("NVIDIA-L4",),
        ),
        Accelerator(
            type=AcceleratorType.A100_40GB,
            display_name="NVIDIA A100 40GB",
            memory_bytes=40960 * MIB,
            bandwidth_bytes_per_s=1555 * GB,
            fp16_dense_tflops=312.0,
            compute_capability=ComputeCapability(8, 0),
            price_per_hour=32.77 / 8,
            product_labels=(
                "A100-SXM4-40GB",
                "NVIDIA-A100-SXM4-40GB",
                "NVIDIA-A100-PCIE-40GB",
                "NVIDIA-A100-PCIe-40GB",
                "A100-PCIE-40GB",
            ),
            mig_profiles=_A100_40GB_MIG,
        ),
        Accelerator(
            type=AcceleratorType.A100_80GB,
            display_name="NVIDIA A100 80GB",
            memory_bytes=81920 * MIB,
            bandwidth_bytes_per_s=2039 * GB,
            fp16_dense_tflops=312.0,
            compute_capability=ComputeCapability(8, 0),
            price_per_hour=40.97 / 8,
            product_labels=(
                "A100-SXM4-80GB",
                "NVIDIA-A100-SXM4-80GB",
                "NVIDIA-A100-80GB-PCIe",
                "A100-80GB-PCIe",
                "NVIDIA-A100-PCIE-80GB",
            ),
            mig_profiles=_A100_80GB_MIG,
        ),
        Accelerator(
            type=AcceleratorType.H100_80GB,
            display_name="NVIDIA H100 80GB",
            memory_bytes=81559 * MIB,
            bandwidth_bytes_per_s=3350 * GB,
            fp16_dense_tflops=989.0,
            compute_capability=ComputeCapability(9, 0),
            price_per_hour=98.32 / 8,
            product_labels=(
                "NVIDIA-H100-80GB-HBM3",
                "H100-80GB-HBM3",
                "NVIDIA-H100-SXM5-80GB",
                "NVIDIA-H100-PCIe",
                "NVIDIA-H100-80GB-PCIe",
                "H100-PCIe",
            ),
            mig_profiles=_H100_80GB_MIG,
        ),
        Accelerator(
            type=AcceleratorType.CPU,
            display_name="CPU (vLLM CPU build)",
            # A CPU replica's KV space is configured (VLLM_CPU_KVCACHE_SPACE); the planner sizes it.
            memory_bytes=0,
            bandwidth_bytes_per_s=100 * GB,
            fp16_dense_tflops=2.0,
            compute_capability=None,
            price_per_hour=0.357,
        ),
    )
}

GPU_TYPES: tuple[AcceleratorType, ...] = tuple(t for t, a in ACCELERATORS.items() if a.is_gpu)

# The catalog's MIG profiles must be exactly the API contract's (the CRD's CEL rules use those).
assert {t: tuple(p.name for p in a.mig_profiles) for t, a in ACCELERATORS.items() if a.mig_profiles} == dict(
    MIG_PROFILES_BY_TYPE
)


def accelerator(accelerator_type: AcceleratorType | str) -> Accelerator:
    """The catalog entry of a concrete accelerator type ('auto' is not one)."""
    key = AcceleratorType(accelerator_type)
    found = ACCELERATORS.get(key)
    if found is None:
        known = ", ".join(t.value for t in ACCELERATORS)
        raise KeyError(f"no accelerator {key.value!r} in the catalog (known: {known})")
    return found


MIG_PRODUCT_SEPARATOR = "-MIG-"


def _normalise_product(label: str) -> str:
    return label.strip().lower()


_BY_PRODUCT: Mapping[str, AcceleratorType] = {
    _normalise_product(label): a.type for a in ACCELERATORS.values() for label in a.product_labels
}


def accelerator_for_product(product_label: str) -> tuple[Accelerator, str | None] | None:
    """Map an `nvidia.com/gpu.product` value to (accelerator, MIG profile or None).

    Handles single-strategy slice products such as `A100-SXM4-40GB-MIG-1g.5gb`. Unknown
    variants of known GPUs (a new SKU suffix) are matched by their model and memory size.
    """
    label = product_label.strip()
    profile: str | None = None
    index = label.upper().find(MIG_PRODUCT_SEPARATOR)
    if index >= 0:
        profile = label[index + len(MIG_PRODUCT_SEPARATOR) :]
        label = label[:index]
    accelerator_type = _BY_PRODUCT.get(_normalise_product(label)) or _guess_type(label)
    if accelerator_type is None:
        return None
    found = ACCELERATORS[accelerator_type]
    if profile is not None and profile not in {p.name for p in found.mig_profiles}:
        return None
    return found, profile


def _guess_type(label: str) -> AcceleratorType | None:
    upper = label.upper()
    if "A100" in upper:
        return AcceleratorType.A100_80GB if "80GB" in upper else AcceleratorType.A100_40GB
    if "H100" in upper and "NVL" not in upper:  # H100 NVL has 94 GB: not in the catalog
        return AcceleratorType.H100_80GB
    if "A10G" in upper:
        return AcceleratorType.A10G
    tokens = set(upper.replace("_", "-").split("-"))
    if "T4" in tokens:
        return AcceleratorType.T4
    if "L4" in tokens:
        return AcceleratorType.L4
    return None


def mig_resource_name(profile: str) -> str:
    """Extended resource of a MIG slice under the mixed strategy."""
    return f"nvidia.com/mig-{profile}"


def mig_slice_product(parent_product: str, profile: str) -> str:
    """`nvidia.com/gpu.product` of a node exposing slices with the single strategy."""
    return f"{parent_product}{MIG_PRODUCT_SEPARATOR}{profile}"
