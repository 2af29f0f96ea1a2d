"""The periodic resync (issue 9): every `resyncSeconds` the controller enqueues the key of every LlamaService
in the index, catching what no watch event reported. No cluster: the indexes are plain dicts standing in
for kopf's, and no worker runs (the keys are read off the queue)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterator
from typing import Any, cast

import kopf
import pytest

from llama_operator.api.settings import Settings
from llama_operator.handlers.controller import Controller, Key
from llama_operator.handlers.indexes import Indexes
from llama_operator.infra.metrics import OperatorMetrics
from tests.planning.builders import gpu_node

RESYNC = 0.05  # seconds: under the configurable floor (1 s), set past validation for the test's speed
KEYS: list[Key] = [("team-a", "chat"), ("team-a", "code"), ("team-b", "chat")]


def body(namespace: str, name: str) -> dict[str, Any]:
    return {"metadata": {"namespace": namespace, "name": name}}


def fake_indexes(
    llamaservices: dict[Key, list[dict[str, Any]]], nodes: dict[Any, list[dict[str, Any]]] | None = None
) -> Indexes:
    """kopf.Index is a mapping of key to a store of values; a dict of lists behaves alike for the
    controller."""

    def index(content: dict[Any, list[dict[str, Any]]]) -> Any:
        return cast("kopf.Index[Any, dict[str, Any]]", content)

    return Indexes(
        llamaservices=index(llamaservices),
        nodes=index(nodes or {}),
        pods=index({}),
        deployments=index({}),
        services=index({}),
        pdbs=index({}),
        pod_monitors=index({}),
        endpoint_slices=index({}),
    )


@pytest.fixture
def llamaservices() -> dict[Key, list[dict[str, Any]]]:
    return {key: [body(*key)] for key in KEYS}


@pytest.fixture
def controller(llamaservices: dict[Key, list[dict[str, Any]]]) -> Iterator[Controller]:
    memo = kopf.Memo()
    memo.settings = Settings().model_copy(update={"resync_seconds": RESYNC})
    memo.metrics = OperatorMetrics()
    made = Controller(memo, fake_indexes(llamaservices), leader=None)
    yield made
    made.pool.shutdown(wait=False)
    made.autoscaler_pool.shutdown(wait=False)


def run(main: Callable[[], Awaitable[None]]) -> None:
    asyncio.run(asyncio.wait_for(main(), timeout=5))


async def drain(controller: Controller) -> set[Key]:
    """Every key queued now, each taken and finished as a worker would."""
    keys: set[Key] = set()
    while len(controller.queue):
        key = await controller.queue.get()
        keys.add(key)
        await controller.queue.done(key)
    return keys


async def wait_queued(controller: Controller, count: int) -> None:
    while len(controller.queue) < count:
        await asyncio.sleep(RESYNC / 5)


def test_the_resync_period_is_a_setting() -> None:
    assert Settings().resync_seconds == 300.0  # the documented default: 5 minutes
    assert Settings(resync_seconds=1).resync_seconds == 1
    for under_a_second in (0, RESYNC):
        with pytest.raises(ValueError, match="resync_seconds"):
            Settings(resync_seconds=under_a_second)


def test_enqueue_all_queues_every_key_of_the_index(controller: Controller) -> None:
    async def main() -> None:
        assert len(controller.queue) == 0
        await controller.enqueue_all()
        assert len(controller.queue) == len(KEYS)
        assert await drain(controller) == set(KEYS)

    run(main)


def test_the_resync_enqueues_every_key_every_period(
    controller: Controller, llamaservices: dict[Key, list[dict[str, Any]]]
) -> None:
    async def main() -> None:
        loop = asyncio.get_running_loop()
        started = loop.time()
        task = asyncio.create_task(controller._resync())
        try:
            # Nothing before the first period: a resync, not a burst at start.
            await asyncio.sleep(RESYNC / 5)
            assert len(controller.queue) == 0
            await wait_queued(controller, len(KEYS))
            assert loop.time() - started >= RESYNC * 0.9
            assert await drain(controller) == set(KEYS)

            # The next period reads the index again: a new LlamaService is in, a deleted one is out.
            llamaservices[("team-c", "new")] = [body("team-c", "new")]
            del llamaservices[("team-a", "code")]
            expected = set(llamaservices)
            await wait_queued(controller, len(expected))
            assert await drain(controller) == expected

            # And again: it keeps going, period after period.
            await wait_queued(controller, len(expected))
            assert await drain(controller) == expected
        finally:
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task

    run(main)


def test_the_resync_loop_sleeps_the_configured_period(controller: Controller) -> None:
    """The loop's own contract, without real time: sleep resync_seconds, then enqueue_all, forever."""
    sleeps: list[float] = []
    calls: list[int] = []

    async def main() -> None:
        real_sleep = asyncio.sleep

        async def fake_sleep(seconds: float) -> None:
            sleeps.append(seconds)
            if len(sleeps) > 3:
                raise asyncio.CancelledError
            await real_sleep(0)

        async def counted_enqueue_all() -> None:
            calls.append(len(sleeps))

        controller.enqueue_all = counted_enqueue_all  # type: ignore[method-assign]
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(asyncio, "sleep", fake_sleep)
            with pytest.raises(asyncio.CancelledError):
                await controller._resync()

    run(main)
    assert sleeps == [RESYNC] * 4
    assert calls == [1, 2, 3]  # each enqueue_all after a full period, never before the first


def test_the_resync_counts_unknown_gpu_nodes_without_any_llamaservice() -> None:
    """llama_operator_unknown_gpu_nodes comes from the nodes: a cluster with no LlamaService yet says it too."""
    memo = kopf.Memo()
    memo.settings = Settings().model_copy(update={"resync_seconds": RESYNC})
    memo.metrics = OperatorMetrics()
    nodes = {"x-0": [gpu_node("x-0", "NVIDIA-X1000", 8)], "t4": [gpu_node("t4", "Tesla-T4", 1)]}
    made = Controller(memo, fake_indexes({}, nodes), leader=None)
    try:
        run(made.enqueue_all)
        text = memo.metrics.exposition().decode()
        assert 'llama_operator_unknown_gpu_nodes{product="NVIDIA-X1000"} 1.0' in text
        assert "Tesla-T4" not in text
    finally:
        made.pool.shutdown(wait=False)
        made.autoscaler_pool.shutdown(wait=False)
