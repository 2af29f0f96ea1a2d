from __future__ import annotations

from llama_bench.fleetsim.engine import FleetEngine, PodInfo, ServiceInfo, ServiceKey

KEY: ServiceKey = ("team", "chat")
SLICE = ServiceInfo(accelerator="a100-80gb-1g.10gb", served_model_name="chat", max_num_seqs=64)


def pod(name: str, *, ready: bool = True, terminating: bool = False, service: str = "chat") -> PodInfo:
    return PodInfo("team", name, f"uid-{name}", service, ready=ready, terminating=terminating)


def engine_with(pods: list[PodInfo], now: float = 0.0) -> FleetEngine:
    engine = FleetEngine(seed=3)
    engine.sync(pods, {KEY: SLICE}, now)
    return engine
