"""LoRA adapters in the router: a request whose `model` names an adapter goes to the base LlamaService, to a
pod that holds the adapter (preferring one where vLLM has it in its batch); /v1/models lists adapters; the
requests are counted per model. Over real sockets, as tests/router/test_proxy.py."""

from __future__ import annotations

import asyncio
from typing import Any

import aiohttp

from llama_operator.router.cluster import service_info
from llama_operator.router.picker import adapter_endpoints, vllm_active_adapters
from llama_operator.router.routing import Caller, ServiceInfo, resolve
from tests.router.test_proxy import KEY, SECRET, FakeView, post, run, serving, stack, upstream_app

SQL_HOLDERS = frozenset({"chat-b", "chat-c"})


class AdapterView(FakeView):
    """FakeView with pods named, and a service with LoRA adapters placed by the operator."""

    def __init__(self) -> None:
        super().__init__()
        self.services[KEY] = ServiceInfo(
            uid="uid-1",
            activation_timeout_seconds=30.0,
            models=("chat-model",),
            adapters=("sql", "docs"),
            adapter_pods=(("sql", SQL_HOLDERS), ("docs", frozenset())),
        )
        self.pod_names: dict[str, str] = {}

    def endpoint_pods(self, key: Any) -> dict[str, str]:
        return {ep: self.pod_names[ep] for ep in self.endpoints(key)}


def _adapter_body(model: str) -> dict[str, Any]:
    return {"model": model, "prompt": "SELECT", "stream": True, "delay": 0}


def test_a_request_for_an_adapter_goes_to_a_pod_that_holds_it() -> None:
    async def scenario() -> None:
        view = AdapterView()
        async with (
            stack(view) as (_u, proxy, router),
            serving(upstream_app("chat-a")) as a,
            serving(upstream_app("chat-b")) as b,
            serving(upstream_app("chat-c")) as c,
        ):
            view.pod_names = {a: "chat-a", b: "chat-b", c: "chat-c"}
            view.ready[KEY] += [a, b, c]
            router_host = "llama-router.llama-system:8000"
            served_by = set()
            for _ in range(12):
                status, headers, _, _ = await post(
                    proxy, router_host, body=_adapter_body("sql"), path="/v1/completions"
                )
                assert status == 200
                served_by.add(headers["X-Upstream"])
            assert served_by <= {"chat-b", "chat-c"}, "only the pods that hold sql"
            # Its base model still goes anywhere.
            for _ in range(12):
                _, headers, _, _ = await post(
                    proxy, router_host, body={"model": "chat-model", "stream": True, "delay": 0}
                )
                served_by.add(headers["X-Upstream"])
            assert "chat-a" in served_by
            # Once vLLM reports sql in chat-c's batch, requests for it go there (no swap from host memory).
            router.load.active_adapters[c] = frozenset({"sql"})
            for _ in range(6):
                _, headers, _, _ = await post(
                    proxy, router_host, body=_adapter_body("sql"), path="/v1/completions"
                )
                assert headers["X-Upstream"] == "chat-c"
            # An adapter no ready pod has yet (just added to the spec) goes to any pod.
            status, _, _, _ = await post(
                proxy, router_host, body=_adapter_body("docs"), path="/v1/completions"
            )
            assert status == 200
            picks = {
                s.labels["reason"]: s.value
                for s in next(iter(router.metrics.adapter_picks.collect())).samples
                if s.name.endswith("_total")
            }
            assert picks == {"held": 12.0, "loaded": 6.0, "unplaced": 1.0}
            counted = {
                (s.labels["model"], s.labels["kind"]): s.value
                for s in next(iter(router.metrics.model_requests.collect())).samples
                if s.name.endswith("_total")
            }
            assert counted == {
                ("sql", "adapter"): 18.0,
                ("chat-model", "base"): 12.0,
                ("docs", "adapter"): 1.0,
            }

    run(scenario())


def test_a_held_adapter_request_wakes_its_base_service() -> None:
    async def scenario() -> None:
        view = AdapterView()
        async with stack(view) as (_u, proxy, _router), serving(upstream_app("chat-b")) as b:
            view.pod_names = {b: "chat-b"}

            async def wake() -> None:
                while not view.demands:
                    await asyncio.sleep(0.05)
                view.turn_ready(KEY, b)

            waker = asyncio.create_task(wake())
            status, headers, _, _ = await post(
                proxy, "llama-router.llama-system:8000", body=_adapter_body("sql"), path="/v1/completions"
            )
            await waker
            assert status == 200 and headers["X-Upstream"] == "chat-b"
            assert view.demands[0][0] == KEY, "the adapter's demand is its base service's"

    run(scenario())


def test_v1_models_lists_adapters_with_their_base_model() -> None:
    async def scenario() -> None:
        view = AdapterView()
        async with stack(view) as (_u, proxy, _router):
            connector = aiohttp.TCPConnector(local_addr=("127.0.0.1", 0))
            async with (
                aiohttp.ClientSession(connector=connector) as session,
                session.get(f"http://{proxy}/v1/models", headers={"Host": "llama-router"}) as response,
            ):
                listed = await response.json()
            cards = {card["id"]: card for card in listed["data"]}
            assert set(cards) == {"chat-model", "sql", "docs"}
            assert cards["sql"]["parent"] == "chat-model" and "parent" not in cards["chat-model"]

    run(scenario())


def test_an_adapter_name_resolves_to_its_base_service_only_in_its_namespace() -> None:
    view = AdapterView()
    services = view.known()
    found = resolve(
        Caller("team-a"), host=None, explicit=None, model="sql", namespace_header=None, services=services
    )
    assert found.key == KEY
    other = resolve(
        Caller("team-b"), host=None, explicit=None, model="sql", namespace_header=None, services=services
    )
    assert other.key is None and other.status == 404
    assert SECRET in services


def test_service_info_reads_adapters_from_the_spec_and_their_pods_from_the_status() -> None:
    info = service_info(
        {
            "metadata": {"uid": "u1"},
            "spec": {
                "model": {"name": "meta-llama/Llama-3.2-1B-Instruct"},
                "adapters": [{"name": "sql", "source": "org/sql"}, {"name": "docs", "source": "org/docs"}],
            },
            "status": {
                "plan": {"accelerator": "t4", "servedModelName": "llama-1b"},
                "adapters": [{"name": "sql", "replicas": ["p-1", "p-2"]}, {"name": "docs"}],
            },
        }
    )
    assert info.adapters == ("sql", "docs") and info.serves("sql") and info.serves("llama-1b")
    assert info.holders("sql") == frozenset({"p-1", "p-2"}) and info.holders("docs") == frozenset()
    assert info.holders("llama-1b") == frozenset()


def test_adapter_endpoints_prefer_loaded_then_held_then_any() -> None:
    endpoints = ["a:8000", "b:8000", "c:8000"]
    pods = {"a:8000": "pa", "b:8000": "pb", "c:8000": "pc"}
    active = {"c:8000": frozenset({"sql"})}

    def choose(holders: frozenset[str], busy: frozenset[str] = frozenset()) -> tuple[list[str], str]:
        return adapter_endpoints(
            endpoints, pod_of=pods, holders=holders, active=active, adapter="sql", busy=busy
        )

    assert choose(frozenset({"pb", "pc"})) == (["c:8000"], "loaded")
    assert choose(frozenset({"pb", "pc"}), busy=frozenset({"c:8000"})) == (["b:8000", "c:8000"], "held")
    assert choose(frozenset({"pa", "pb"})) == (["a:8000", "b:8000"], "held")
    assert choose(frozenset()) == (endpoints, "unplaced")


def test_active_adapters_are_the_newest_lora_info_sample() -> None:
    # vLLM 0.32 keeps one sample per label set it ever set, valued with the time it set it.
    text = (
        "# TYPE vllm:lora_requests_info gauge\n"
        'vllm:lora_requests_info{max_lora="4",running_lora_adapters="sql,docs",waiting_lora_adapters=""} 1.7e9\n'
        'vllm:lora_requests_info{max_lora="4",running_lora_adapters="sql",waiting_lora_adapters="chat"} 1.8e9\n'
        'vllm:num_requests_waiting{model_name="x"} 0.0\n'
    )
    assert vllm_active_adapters(text) == frozenset({"sql", "chat"})
    assert vllm_active_adapters("vllm:num_requests_waiting 0\n") == frozenset()
