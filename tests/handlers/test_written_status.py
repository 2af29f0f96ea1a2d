"""The status memory that bridges the index's lag behind our own status writes."""

from __future__ import annotations

from typing import Any

from llama_operator.handlers.written_status import WrittenStatus

KEY = ("team-a", "chat")


def obj(version: str, **status: Any) -> dict[str, Any]:
    return {"metadata": {"name": "chat", "resourceVersion": version}, "status": status}


def test_the_index_is_used_when_nothing_was_written() -> None:
    assert WrittenStatus().current(KEY, obj("5", phase="Ready")) == {"phase": "Ready"}


def test_our_write_is_seen_until_the_watch_brings_it_back() -> None:
    memory = WrittenStatus()
    before = obj("5", phase="Pending")
    memory.record(KEY, before, obj("6", phase="Degraded"))
    assert memory.current(KEY, before) == {"phase": "Degraded"}  # the index still shows version 5
    assert memory.current(KEY, obj("6", phase="Degraded")) == {"phase": "Degraded"}
    # Caught up: from now on the index is the truth, even if it says something else later.
    assert memory.current(KEY, obj("5", phase="Pending")) == {"phase": "Pending"}


def test_a_newer_version_from_someone_else_wins() -> None:
    memory = WrittenStatus()
    memory.record(KEY, obj("5"), obj("6", phase="Degraded"))
    assert memory.current(KEY, obj("9", phase="Ready")) == {"phase": "Ready"}


def test_two_writes_before_the_index_catches_up() -> None:
    memory = WrittenStatus()
    memory.record(KEY, obj("5"), obj("6", phase="Degraded"))
    # A second writer (the autoscaler) based itself on our first write while the index showed 5.
    memory.record(KEY, obj("5"), obj("7", phase="Degraded", ttft=0.4))
    assert memory.current(KEY, obj("5")) == {"phase": "Degraded", "ttft": 0.4}
    assert memory.current(KEY, obj("6", phase="Degraded")) == {"phase": "Degraded", "ttft": 0.4}
    assert memory.current(KEY, obj("7", phase="Degraded", ttft=0.4)) == {"phase": "Degraded", "ttft": 0.4}


def test_a_write_to_an_object_gone_meanwhile_is_not_remembered() -> None:
    memory = WrittenStatus()
    memory.record(KEY, obj("5"), None)
    assert memory.current(KEY, obj("5", phase="Pending")) == {"phase": "Pending"}


def test_forget() -> None:
    memory = WrittenStatus()
    memory.record(KEY, obj("5"), obj("6", phase="Degraded"))
    memory.forget(KEY)
    assert memory.current(KEY, obj("5", phase="Pending")) == {"phase": "Pending"}
