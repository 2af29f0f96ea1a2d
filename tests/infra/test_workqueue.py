"""The keyed work queue: dedupe, delays, one worker per key, re-run when added while in flight."""

from __future__ import annotations

import asyncio

from llama_operator.infra.workqueue import WorkQueue


def run(coro: object) -> None:
    asyncio.run(coro)  # type: ignore[arg-type]


def test_a_key_added_many_times_is_processed_once() -> None:
    async def main() -> None:
        q: WorkQueue[str] = WorkQueue()
        for _ in range(5):
            await q.add("a")
        await q.add("b")
        assert len(q) == 2
        assert {await q.get(), await q.get()} == {"a", "b"}
        assert len(q) == 0

    run(main())


def test_a_delayed_key_waits_and_an_earlier_add_wins() -> None:
    async def main() -> None:
        q: WorkQueue[str] = WorkQueue()
        loop = asyncio.get_running_loop()
        await q.add("later", delay=0.3)
        await q.add("now", delay=0.0)
        assert await q.get() == "now"
        start = loop.time()
        assert await q.get() == "later"
        assert loop.time() - start >= 0.25
        await q.add("x", delay=10)
        await q.add("x", delay=0)  # an event arrives: do not wait for the retry
        assert await asyncio.wait_for(q.get(), timeout=1) == "x"

    run(main())


def test_a_key_in_flight_is_not_handed_out_twice_and_runs_again_after() -> None:
    async def main() -> None:
        q: WorkQueue[str] = WorkQueue()
        await q.add("a")
        assert await q.get() == "a"
        await q.add("a")  # changed while a worker reconciles it
        assert len(q) == 0 and q.in_flight == 1
        getter = asyncio.ensure_future(q.get())
        await asyncio.sleep(0.05)
        assert not getter.done()  # no second worker on the same key
        await q.done("a")
        assert await asyncio.wait_for(getter, timeout=1) == "a"

    run(main())


def test_done_with_requeue_after_retries() -> None:
    async def main() -> None:
        q: WorkQueue[str] = WorkQueue()
        await q.add("a")
        await q.get()
        await q.done("a", requeue_after=0.1)
        assert await asyncio.wait_for(q.get(), timeout=1) == "a"
        await q.done("a")
        assert len(q) == 0

    run(main())


def test_many_waiting_workers_each_get_one_key() -> None:
    async def main() -> None:
        q: WorkQueue[int] = WorkQueue()
        workers = [asyncio.ensure_future(q.get()) for _ in range(3)]
        await asyncio.sleep(0.01)
        for k in range(3):
            await q.add(k)
        got = await asyncio.wait_for(asyncio.gather(*workers), timeout=1)
        assert sorted(got) == [0, 1, 2]

    run(main())
