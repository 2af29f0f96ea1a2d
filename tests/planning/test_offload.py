"""Host memory a replica's engine uses planned into its pod (issue 43): engine.kvOffload (vLLM's native KV
offloading) and --cpu-offload-gb go into the memory request and limit; --kv-offloading-size in extraArgs is
refused naming the field (on main it passed through and the pod kept 12Gi: OOM-killed)."""

from __future__ import annotations

import pytest

from llama_operator.catalog.accelerators import GIB
from llama_operator.planning import PlanningError
from tests.planning.builders import plan, spec

LLAMA_8B = "meta-llama/Llama-3.1-8B-Instruct"


def gi(quantity: str) -> int:
    assert quantity.endswith("Gi")
    return int(quantity.removesuffix("Gi"))


def arg(args: list[str], flag: str) -> str | None:
    return args[args.index(flag) + 1] if flag in args else None


def test_kv_offload_is_a_field_planned_into_the_pods_memory() -> None:
    alone = plan(spec({"type": "l4"}, model=LLAMA_8B))
    offloaded = plan(spec({"type": "l4"}, {"kvOffload": {"cpuBytes": "40Gi"}}, model=LLAMA_8B))
    assert gi(offloaded.memory_request) == gi(alone.memory_request) + 40
    assert arg(offloaded.vllm_args, "--kv-offloading-size") == "40"
    assert arg(offloaded.vllm_args, "--kv-offloading-backend") == "native"
    assert any(n.startswith("KV offload: 40 GiB of host memory") for n in offloaded.notes)
    # Any quantity: 500M is 0.47 GiB of vLLM's GiB.
    small = plan(spec({"type": "l4"}, {"kvOffload": {"cpuBytes": "500M"}}, model=LLAMA_8B))
    assert float(arg(small.vllm_args, "--kv-offloading-size") or 0) == pytest.approx(500e6 / GIB)


@pytest.mark.parametrize("flag", ["--kv-offloading-size", "--kv-offloading-backend"])
def test_kv_offload_flags_in_extra_args_are_refused_naming_the_field(flag: str) -> None:
    value = "40" if flag == "--kv-offloading-size" else "native"
    with pytest.raises(PlanningError, match=r"set spec\.engine\.kvOffload"):
        plan(spec({"type": "l4"}, {"extraArgs": [flag, value]}, model=LLAMA_8B))


def test_cpu_offload_gb_is_planned_into_the_pods_memory_and_frees_gpu_memory() -> None:
    alone = plan(spec({"type": "l4"}, model=LLAMA_8B))
    offloaded = plan(spec({"type": "l4"}, {"extraArgs": ["--cpu-offload-gb", "10"]}, model=LLAMA_8B))
    assert gi(offloaded.memory_request) == gi(alone.memory_request) + 10
    # Ten GiB of weights off the GPU: that much more KV cache (less the activation estimate's share).
    gained = (offloaded.kv_cache_tokens - alone.kv_cache_tokens) * alone.kv_bytes_per_token
    assert gained == pytest.approx(10 * GIB, rel=0.03)
    # Per GPU: two GPUs hold twice as much in host memory.
    two = plan(spec({"type": "l4", "count": 2}, {"extraArgs": ["--cpu-offload-gb", "10"]}, model=LLAMA_8B))
    two_alone = plan(spec({"type": "l4", "count": 2}, model=LLAMA_8B))
    assert gi(two.memory_request) == gi(two_alone.memory_request) + 20


def test_offload_on_a_cpu_replica_is_refused() -> None:
    with pytest.raises(PlanningError, match="a CPU replica has its KV cache and weights there already"):
        plan(spec({"type": "cpu"}, {"kvOffload": {"cpuBytes": "4Gi"}}))
