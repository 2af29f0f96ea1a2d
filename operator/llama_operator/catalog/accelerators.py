"""The accelerators the operator knows: the facts the planner sizes vLLM with.

Sources:
- memory: the total `nvidia-smi` reports, which is what the GPU Operator publishes as
  `nvidia.com/gpu.memory` (MiB) and what vLLM's `--gpu-memory-utilization` is a fraction of
  (A10/A10G 23028, L4 23034, L40S 46068, H100 81559, H200 143771, B200 183359);
- bandwidth, dense FP16 tensor TFLOPS (the data sheets' sparse figure halved): NVIDIA data sheets
  (T4, A10, L4, L40S, A100, H100 PCIe and SXM, H200, B200 in the DGX B200 / HGX data sheet);
  AWS's A10G is an A10 variant (600 GB/s, sm_86) with the lower clock AWS publishes (70 TFLOPS);
- compute capability: NVIDIA's CUDA GPU list (B200: sm_100); bf16 and FlashAttention-2 need
  sm_80, FP8 tensor cores sm_89 (Ada) or sm_90 (Hopper) and later;
- MIG profiles: NVIDIA's MIG user guide (profile names, compute slices g/7, memory slices /8,
  including the H200 141GB and B200 180GB tables); slice memory as GPU Feature Discovery labels
  it (`nvidia.com/mig-<profile>.memory`, MiB; seen on real nodes: A100-80GB 1g.10gb 9728, H100
  1g.10gb 9984), the other profiles scaled from the same guide; H200 and B200 slices estimated as
  their share of memory slices of nvidia-smi's total, less 2.5 % (what A100/H100 slices lose);
- price: on-demand list price of ONE GPU per hour in AWS us-east-1 (2024), the instance price
  divided by its GPU count: g4dn.xlarge (T4) $0.526, g5.xlarge (A10G) $1.006, g6.xlarge (L4)
  $0.805, g6e.xlarge (L40S) $1.861, p4d.24xlarge (8x A100-40GB) $32.77, p4de.24xlarge (8x
  A100-80GB) $40.97, p5.48xlarge (8x H100 SXM) $98.32. Where AWS lists none, kept in AWS's
  terms: the A10 at its AWS variant's (A10G) price; ESTIMATES for the H100 PCIe (the SXM's price
  times Lambda Cloud's 2024 PCIe/SXM price ratio, $2.49 / $3.29), the H200 and the B200 (1.3x and
  2x the H100 SXM's, about their memory and bandwidth ratios), until a platform sets its own. A CPU replica is priced as a c7i.2xlarge (8 vCPU, 16 GiB) $0.357. Only
  the ratios matter; config.priceOverrides replaces them, config.accelerators adds or overrides a
  whole accelerator (docs/install.md);
- interconnect (what tensor parallel's all-reduces cross), bandwidth per direction: NVLink from NVIDIA's
  data sheets, whose figures are both directions summed (A100 SXM 600 GB/s -> 300, H100 SXM and H200
  900 -> 450, B200 1800 -> 900); the catalog's A100 entries are the SXM boards of p4d/p4de. The
  others talk over PCIe (PCI-SIG: Gen3 x16 ~16 GB/s per direction for the T4, Gen4 x16 ~32 GB/s for
  the A10/A10G/L4/L40S, Gen5 x16 ~64 GB/s for the H100 PCIe, whose NVLink bridge is optional). The
  latency of one all-reduce call is an ESTIMATE: ~10 us over NVLink (vLLM's custom all-reduce for small
  messages), ~30 us over PCIe (NCCL's ring through the host bridge, several hops at 8 GPUs).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace

from llama_operator.api.settings import AcceleratorSettings
from llama_operator.api.spec import MIG_PROFILES_BY_TYPE, AcceleratorType
from llama_operator.catalog.platforms import (
    BUILTIN_NODE_LABELS,
    GKE_PARTITION_SIZE_LABEL,
    NodeLabels,
    Platform,
    platform_of_node,
)

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
# W8A8 INT8 (compressed-tensors): vLLM's scheme needs sm_75 (CompressedTensorsW8A8Int8.get_min_capability),
# and its CUTLASS kernels for sm_100 and later have no INT8 path (csrc/.../scaled_mm_c3x_sm100.cu:
# "int8 not supported on SM100"): from Blackwell on, FP8 is the 8-bit format.
INT8_W8A8_MIN_CAPABILITY = ComputeCapability(7, 5)
INT8_W8A8_FIRST_UNSUPPORTED = ComputeCapability(10, 0)


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
class Interconnect:
    """The link tensor parallel's all-reduces cross between the GPUs of one node."""

    name: str
    link_bytes_per_s: float  # per direction, per GPU
    all_reduce_latency_seconds: float  # fixed cost of one all-reduce call


NVLINK_ALL_REDUCE_LATENCY_SECONDS = 10e-6
PCIE_ALL_REDUCE_LATENCY_SECONDS = 30e-6
PCIE_GEN3 = Interconnect("PCIe Gen3 x16", 16 * GB, PCIE_ALL_REDUCE_LATENCY_SECONDS)
PCIE_GEN4 = Interconnect("PCIe Gen4 x16", 32 * GB, PCIE_ALL_REDUCE_LATENCY_SECONDS)
PCIE_GEN5 = Interconnect("PCIe Gen5 x16", 64 * GB, PCIE_ALL_REDUCE_LATENCY_SECONDS)
NVLINK_3 = Interconnect("NVLink 3", 300 * GB, NVLINK_ALL_REDUCE_LATENCY_SECONDS)
NVLINK_4 = Interconnect("NVLink 4", 450 * GB, NVLINK_ALL_REDUCE_LATENCY_SECONDS)
NVLINK_5 = Interconnect("NVLink 5", 900 * GB, NVLINK_ALL_REDUCE_LATENCY_SECONDS)


@dataclass(frozen=True)
class Accelerator:
    """One accelerator type of the catalog."""

    # An AcceleratorType for the built-in ones (a str enum); a platform-defined one's name otherwise.
    type: str
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
    # Between the GPUs of one node; a platform-defined accelerator is assumed on PCIe Gen4.
    interconnect: Interconnect = PCIE_GEN4
    # The labels each cloud platform gives a node with this GPU (catalog/platforms.py); GFD's are
    # product_labels. A platform missing here does not offer this GPU.
    node_labels: Mapping[Platform, NodeLabels] = field(default_factory=dict)

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
    def supports_int8_w8a8(self) -> bool:
        # vLLM's CPU build runs W8A8 INT8 on its oneDNN kernel (CPUInt8ScaledMMLinearKernel).
        cc = self.compute_capability
        if cc is None:
            return True
        return cc.at_least(
            INT8_W8A8_MIN_CAPABILITY.major, INT8_W8A8_MIN_CAPABILITY.minor
        ) and not cc.at_least(INT8_W8A8_FIRST_UNSUPPORTED.major, INT8_W8A8_FIRST_UNSUPPORTED.minor)

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
        raise KeyError(f"{self.type} has no MIG profile {name!r} (profiles: {known})")

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


def _scaled_mig(total_mib: int, profiles: Iterable[tuple[str, int, int]]) -> tuple[MigProfile, ...]:
    """Slices of a GPU no node has shown us yet: their memory slices' share of the total, less 2.5 %."""
    return tuple(
        _mig(name, c, m, int(total_mib * m / MEMORY_SLICES_PER_GPU * 0.975)) for name, c, m in profiles
    )


_H100_80GB_MIG = (
    _mig("1g.10gb", 1, 1, 9984),
    _mig("1g.20gb", 1, 2, 20096),
    _mig("2g.20gb", 2, 2, 20096),
    _mig("3g.40gb", 3, 4, 40320),
    _mig("4g.40gb", 4, 4, 40320),
    _mig("7g.80gb", 7, 8, 80768),
)

_H200_MIG = _scaled_mig(
    143771,
    (
        ("1g.18gb", 1, 1),
        ("1g.35gb", 1, 2),
        ("2g.35gb", 2, 2),
        ("3g.71gb", 3, 4),
        ("4g.71gb", 4, 4),
        ("7g.141gb", 7, 8),
    ),
)
_B200_MIG = _scaled_mig(
    183359,
    (
        ("1g.23gb", 1, 1),
        ("1g.45gb", 1, 2),
        ("2g.45gb", 2, 2),
        ("3g.90gb", 3, 4),
        ("4g.90gb", 4, 4),
        ("7g.180gb", 7, 8),
    ),
)
_H100_SXM_PRICE = 98.32 / 8

_ENTRIES: tuple[Accelerator, ...] = (
    Accelerator(
        type=AcceleratorType.T4,
        display_name="NVIDIA T4 16GB",
        memory_bytes=15360 * MIB,
        bandwidth_bytes_per_s=320 * GB,
        fp16_dense_tflops=65.0,
        compute_capability=ComputeCapability(7, 5),
        price_per_hour=0.526,
        product_labels=("Tesla-T4", "NVIDIA-Tesla-T4", "NVIDIA-T4"),
        interconnect=PCIE_GEN3,
    ),
    Accelerator(
        type=AcceleratorType.A10,
        display_name="NVIDIA A10 24GB",
        memory_bytes=23028 * MIB,
        bandwidth_bytes_per_s=600 * GB,
        fp16_dense_tflops=125.0,
        compute_capability=ComputeCapability(8, 6),
        price_per_hour=1.006,  # as its AWS variant, the A10G (g5.xlarge)
        product_labels=("NVIDIA-A10",),
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
        type=AcceleratorType.L40S,
        display_name="NVIDIA L40S 48GB",
        memory_bytes=46068 * MIB,
        bandwidth_bytes_per_s=864 * GB,
        fp16_dense_tflops=362.0,
        compute_capability=ComputeCapability(8, 9),
        price_per_hour=1.861,
        product_labels=("NVIDIA-L40S",),
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
        interconnect=NVLINK_3,
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
        interconnect=NVLINK_3,
    ),
    Accelerator(
        type=AcceleratorType.H100_PCIE,
        display_name="NVIDIA H100 PCIe 80GB",
        memory_bytes=81559 * MIB,
        bandwidth_bytes_per_s=2000 * GB,
        fp16_dense_tflops=756.0,
        compute_capability=ComputeCapability(9, 0),
        price_per_hour=round(_H100_SXM_PRICE * 249 / 329, 3),  # an estimate (see the module's sources)
        product_labels=("NVIDIA-H100-PCIe", "NVIDIA-H100-80GB-PCIe", "H100-PCIe"),
        mig_profiles=_H100_80GB_MIG,
        interconnect=PCIE_GEN5,
    ),
    Accelerator(
        type=AcceleratorType.H100_80GB,
        display_name="NVIDIA H100 SXM 80GB",
        memory_bytes=81559 * MIB,
        bandwidth_bytes_per_s=3350 * GB,
        fp16_dense_tflops=989.0,
        compute_capability=ComputeCapability(9, 0),
        price_per_hour=_H100_SXM_PRICE,
        product_labels=("NVIDIA-H100-80GB-HBM3", "H100-80GB-HBM3", "NVIDIA-H100-SXM5-80GB"),
        mig_profiles=_H100_80GB_MIG,
        interconnect=NVLINK_4,
    ),
    Accelerator(
        type=AcceleratorType.H200,
        display_name="NVIDIA H200 141GB",
        memory_bytes=143771 * MIB,
        bandwidth_bytes_per_s=4800 * GB,
        fp16_dense_tflops=989.0,
        compute_capability=ComputeCapability(9, 0),
        price_per_hour=round(_H100_SXM_PRICE * 13 / 10, 3),  # an estimate (see the module's sources)
        product_labels=("NVIDIA-H200", "NVIDIA-H200-141GB-HBM3e"),
        mig_profiles=_H200_MIG,
        interconnect=NVLINK_4,
    ),
    Accelerator(
        type=AcceleratorType.B200,
        display_name="NVIDIA B200 180GB",
        memory_bytes=183359 * MIB,
        bandwidth_bytes_per_s=8000 * GB,
        fp16_dense_tflops=2250.0,
        compute_capability=ComputeCapability(10, 0),
        price_per_hour=round(_H100_SXM_PRICE * 2, 3),  # an estimate (see the module's sources)
        product_labels=("NVIDIA-B200",),
        mig_profiles=_B200_MIG,
        interconnect=NVLINK_5,
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
ACCELERATORS: Mapping[str, Accelerator] = {
    a.type: replace(a, node_labels=BUILTIN_NODE_LABELS.get(a.type, {})) for a in _ENTRIES
}

GPU_TYPES: tuple[str, ...] = tuple(t for t, a in ACCELERATORS.items() if a.is_gpu)

# The catalog's MIG profiles must be exactly the API contract's (the CRD's CEL rules use those).
assert {t: tuple(p.name for p in a.mig_profiles) for t, a in ACCELERATORS.items() if a.mig_profiles} == dict(
    MIG_PROFILES_BY_TYPE
)


MIG_PRODUCT_SEPARATOR = "-MIG-"


def _normalise_product(label: str) -> str:
    return label.strip().lower()


@dataclass(frozen=True)
class Catalog:
    """The accelerators the planner chooses from and the inventory matches node labels against: the
    built-in ones, with what the platform added or overrode (config.accelerators)."""

    accelerators: Mapping[str, Accelerator]
    by_product: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not self.by_product:
            products = {
                _normalise_product(p): a.type for a in self.accelerators.values() for p in a.product_labels
            }
            object.__setattr__(self, "by_product", products)

    def get(self, accelerator_type: str) -> Accelerator:
        """The entry of a concrete accelerator type ('auto' is not one); KeyError names the known ones."""
        found = self.accelerators.get(str(accelerator_type))
        if found is None:
            known = ", ".join(str(t) for t in self.accelerators)
            raise KeyError(
                f"no accelerator {str(accelerator_type)!r} in the catalog (known: {known}; a platform adds one "
                "in the operator's config.accelerators)"
            )
        return found

    def for_product(self, product_label: str) -> tuple[Accelerator, str | None] | None:
        """Map an `nvidia.com/gpu.product` value to (accelerator, MIG profile or None).

        Handles single-strategy slice products such as `A100-SXM4-40GB-MIG-1g.5gb`. Unknown variants of
        known GPUs (a new SKU suffix) are matched by their model and memory size."""
        label = product_label.strip()
        profile: str | None = None
        index = label.upper().find(MIG_PRODUCT_SEPARATOR)
        if index >= 0:
            profile = label[index + len(MIG_PRODUCT_SEPARATOR) :]
            label = label[:index]
        accelerator_type = self.by_product.get(_normalise_product(label))
        if accelerator_type is None:
            guessed = _guess_type(label)
            accelerator_type = guessed if guessed in self.accelerators else None
        if accelerator_type is None:
            return None
        found = self.accelerators[accelerator_type]
        if profile is not None and profile not in {p.name for p in found.mig_profiles}:
            return None
        return found, profile

    def for_platform_labels(self, node_labels: Mapping[str, str]) -> tuple[Accelerator, str | None] | None:
        """Map a node without GFD's product label to (accelerator, MIG profile or None) by the labels its
        cloud platform gave it (a GKE partitioned node names its profile), or None when none matches."""
        platform = platform_of_node(node_labels)
        if platform is None:
            return None
        for accel in self.accelerators.values():
            labels = accel.node_labels.get(platform)
            if labels is None or not labels.matches(node_labels):
                continue
            profile = node_labels.get(GKE_PARTITION_SIZE_LABEL) if platform is Platform.GKE else None
            if profile is not None and profile not in {p.name for p in accel.mig_profiles}:
                return None
            return accel, profile
        return None

    def with_accelerators(self, changed: Iterable[Accelerator]) -> Catalog:
        """This catalog with accelerators added or replaced (by type). A changed one's product labels
        are its own: labels it takes over no longer map to the accelerator that had them."""
        merged = dict(self.accelerators)
        for accel in changed:
            merged[accel.type] = accel
        return Catalog(merged)


BUILTIN_CATALOG = Catalog(ACCELERATORS)


def accelerator(accelerator_type: AcceleratorType | str) -> Accelerator:
    """The built-in catalog's entry of a concrete accelerator type ('auto' is not one)."""
    return BUILTIN_CATALOG.get(AcceleratorType(accelerator_type))


def accelerator_for_product(product_label: str) -> tuple[Accelerator, str | None] | None:
    """Map an `nvidia.com/gpu.product` value to (accelerator, MIG profile or None) in the built-in
    catalog (Catalog.for_product for the operator's)."""
    return BUILTIN_CATALOG.for_product(product_label)


def _guess_type(label: str) -> str | None:
    upper = label.upper()
    tokens = set(upper.replace("_", "-").split("-"))
    if "A100" in upper:
        return AcceleratorType.A100_80GB if "80GB" in upper else AcceleratorType.A100_40GB
    if "NVL" in tokens:  # H100 NVL (94 GB), H200 NVL: other memory or clocks than the catalog's
        return None
    # Whole tokens: a GH200 (Grace Hopper, 96 or 144 GB) is no H200, a GB200 no B200.
    if "H100" in tokens:
        return AcceleratorType.H100_PCIE if "PCIE" in tokens else AcceleratorType.H100_80GB
    if "H200" in tokens:
        return AcceleratorType.H200
    if "B200" in tokens:
        return AcceleratorType.B200
    if "A10G" in upper:
        return AcceleratorType.A10G
    if "L40S" in tokens:
        return AcceleratorType.L40S
    if "A10" in tokens:
        return AcceleratorType.A10
    if "T4" in tokens:
        return AcceleratorType.T4
    if "L4" in tokens:
        return AcceleratorType.L4
    return None


def configured_accelerator(name: str, given: AcceleratorSettings, base: Accelerator | None) -> Accelerator:
    """An accelerator of config.accelerators: the built-in entry `base` with the given fields replaced, or
    (base None) a new one from the given fields alone (Settings checked they are all there)."""

    def pick(value: object, default: object) -> object:
        return default if value is None else value

    capability = base.compute_capability if base is not None else None
    if given.compute_capability is not None:
        major, minor = given.compute_capability.split(".")
        capability = ComputeCapability(int(major), int(minor))
    memory = given.memory_mib * MIB if given.memory_mib is not None else None
    bandwidth = given.bandwidth_gbps * GB if given.bandwidth_gbps is not None else None
    profiles = (
        tuple(_mig(p.name, p.compute_slices, p.memory_slices, p.memory_mib) for p in given.mig_profiles)
        if given.mig_profiles is not None
        else None
    )
    node_labels = dict(base.node_labels) if base is not None else {}
    for platform, labels in (given.node_labels or {}).items():
        node_labels[Platform(platform)] = NodeLabels(labels=dict(labels))
    if base is None:
        assert memory is not None and bandwidth is not None and given.fp16_tflops is not None
        assert (
            given.price_per_hour is not None and given.product_labels is not None and capability is not None
        )
        return Accelerator(
            type=name,
            display_name=given.display_name or name,
            memory_bytes=memory,
            bandwidth_bytes_per_s=bandwidth,
            fp16_dense_tflops=given.fp16_tflops,
            compute_capability=capability,
            price_per_hour=given.price_per_hour,
            product_labels=tuple(given.product_labels),
            mig_profiles=profiles or (),
            node_labels=node_labels,
        )
    return Accelerator(
        type=base.type,
        display_name=str(pick(given.display_name, base.display_name)),
        memory_bytes=memory if memory is not None else base.memory_bytes,
        bandwidth_bytes_per_s=bandwidth if bandwidth is not None else base.bandwidth_bytes_per_s,
        fp16_dense_tflops=given.fp16_tflops if given.fp16_tflops is not None else base.fp16_dense_tflops,
        compute_capability=capability,
        price_per_hour=given.price_per_hour if given.price_per_hour is not None else base.price_per_hour,
        product_labels=tuple(given.product_labels)
        if given.product_labels is not None
        else base.product_labels,
        mig_profiles=profiles if profiles is not None else base.mig_profiles,
        interconnect=base.interconnect,
        node_labels=node_labels,
    )


def catalog_from_settings(accelerators: Mapping[str, AcceleratorSettings]) -> Catalog:
    """The built-in catalog with the platform's config.accelerators merged in."""
    if not accelerators:
        return BUILTIN_CATALOG
    changed = [
        configured_accelerator(name, given, BUILTIN_CATALOG.accelerators.get(name))
        for name, given in accelerators.items()
    ]
    return BUILTIN_CATALOG.with_accelerators(changed)


def mig_resource_name(profile: str) -> str:
    """Extended resource of a MIG slice under the mixed strategy."""
    return f"nvidia.com/mig-{profile}"


def mig_slice_product(parent_product: str, profile: str) -> str:
    """`nvidia.com/gpu.product` of a node exposing slices with the single strategy."""
    return f"{parent_product}{MIG_PRODUCT_SEPARATOR}{profile}"
