"""The status this operator last wrote to each LlamaService, until the watch brings that write back.

A reconcile reads the LlamaService from kopf's index, which lags the API server by one watch event. A
reconcile that runs just after a status write (an owned object's event enqueued it) would otherwise see
the status from before that write: it would post again the Warning Event it just posted, and write again
what it just wrote. controller-runtime meets the same lag with "expectations"; this is the same idea,
keyed by resourceVersion so that nothing compares versions as numbers."""

from __future__ import annotations

import threading
from collections.abc import Mapping
from typing import Any

from llama_operator.api.resource import stored_status
from llama_operator.api.status import read_status

Key = tuple[str, str]


class WrittenStatus:
    """Shared by the reconcile workers and the autoscaler thread (both write status)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        # key -> (versions the index may still show from before our last write, that write's version and
        # the status it left)
        self._entries: dict[Key, tuple[frozenset[str], str, dict[str, Any]]] = {}
        self._writers: dict[Key, threading.Lock] = {}

    def writer(self, key: Key) -> threading.Lock:
        """Held while reading, deciding and writing one LlamaService's status: the reconciler and the
        autoscaler each write whole condition lists, so one must not decide from a status the other is
        replacing (a lost update would undo the other's condition)."""
        with self._lock:
            return self._writers.setdefault(key, threading.Lock())

    def current(self, key: Key, body: Mapping[str, Any]) -> dict[str, Any]:
        """The freshest status known: ours while the index still shows a version from before our write;
        the index's as soon as it shows any other version (ours came back, or something newer)."""
        version = str(body["metadata"].get("resourceVersion") or "")
        with self._lock:
            entry = self._entries.get(key)
            if entry is not None and version in entry[0]:
                return dict(entry[2])
            self._entries.pop(key, None)
        return stored_status(body)

    def current_adapters(self, key: Key, body: Mapping[str, Any]) -> list[dict[str, object]] | None:
        """status.adapters as `current` knows it, as written (None: none)."""
        adapters = read_status(self.current(key, body)).adapters
        return None if adapters is None else [a.to_wire() for a in adapters]

    def record(self, key: Key, body: Mapping[str, Any], written: Mapping[str, Any] | None) -> None:
        """After a status write based on `body` (as the index showed it): `written` is the object the API
        server returned (None when it was gone)."""
        if written is None:
            return
        read = str(body["metadata"].get("resourceVersion") or "")
        wrote = str((written.get("metadata") or {}).get("resourceVersion") or "")
        with self._lock:
            entry = self._entries.get(key)
            stale = entry[0] | {entry[1]} if entry is not None and read in entry[0] else frozenset()
            # Every version before ours is stale (our earlier writes included); ours itself is not: the
            # index then shows what we wrote.
            self._entries[key] = ((stale | {read}) - {wrote}, wrote, stored_status(written))

    def forget(self, key: Key) -> None:
        with self._lock:
            self._entries.pop(key, None)
            self._writers.pop(key, None)
