"""List and watch, as raw JSON, forever, and say whether each watch is in sync.

Every list and watch reads the API server's JSON as it is, never through the typed client's models: those
reject what Kubernetes really writes (an EndpointSlice of a Service with no pods has `"endpoints": null`,
which kubernetes 35's V1EndpointSlice refuses, so one such slice made every list fail). Readers of the
objects tolerate null and absent fields themselves.

A watch that cannot list (the API server away, a permission missing) is out of sync: the view's readiness
says so until it lists again. Retries back off (up to BACKOFF_CAP_SECONDS), and the log gets one line when
a watch falls out of sync and one when it is back, never a traceback per retry."""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from kubernetes.client.exceptions import ApiException
from kubernetes.watch.watch import iter_resp_lines

log = logging.getLogger(__name__)

WATCH_SECONDS = 300  # the API server ends each watch after this; it resumes from the last version seen
LIST_TIMEOUT_SECONDS = 60.0  # a list that takes longer is retried (a hung API server is an outage too)
CONNECT_TIMEOUT_SECONDS = 5.0
BACKOFF_FIRST_SECONDS = 0.5
BACKOFF_CAP_SECONDS = 5.0  # short: a held request waits on the re-sync after an outage

# A lister: the typed client's list call of one kind (a namespace's or the cluster's), called with the
# client's raw-response keywords.
Lister = Callable[..., Any]


class ExpiredError(Exception):
    """The watch's resourceVersion is too old (410 Gone): list again. Not an outage."""


def error_line(err: BaseException) -> str:
    """One short line that says what went wrong (no traceback, no multi-line bodies)."""
    if isinstance(err, ApiException):
        return f"{err.status} {err.reason}"
    text = " ".join(str(err).split())
    return f"{type(err).__name__}: {text[:240]}"


def list_raw(lister: Lister) -> tuple[list[dict[str, Any]], str]:
    """The items of one list, as JSON, and the list's resourceVersion to watch from."""
    response = lister(
        _preload_content=False, _request_timeout=(CONNECT_TIMEOUT_SECONDS, LIST_TIMEOUT_SECONDS)
    )
    try:
        body = json.loads(response.data)
    finally:
        response.release_conn()
    items = body.get("items") or []
    return [item for item in items if isinstance(item, dict)], str(body["metadata"]["resourceVersion"])


def watch_raw(lister: Lister, version: str) -> Iterator[dict[str, Any]]:
    """The events of one watch from `version`, as JSON, until the API server ends it. An ERROR event with
    410 raises ExpiredError; any other raises ApiException."""
    response = lister(
        watch=True,
        resource_version=version,
        timeout_seconds=WATCH_SECONDS,
        allow_watch_bookmarks=True,
        _preload_content=False,
        _request_timeout=(CONNECT_TIMEOUT_SECONDS, WATCH_SECONDS + 30),
    )
    try:
        for line in iter_resp_lines(response):
            if not line:
                continue
            event = json.loads(line)
            if not isinstance(event, dict):
                continue
            if event.get("type") == "ERROR":
                status = event.get("object") or {}
                if status.get("code") == 410:
                    raise ExpiredError(status.get("message") or "watch expired")
                raise ApiException(status=status.get("code"), reason=status.get("message") or "watch error")
            yield event
    finally:
        response.close()
        response.release_conn()


@dataclass
class Backoff:
    """Seconds to wait before the next try: doubling from `first` up to `cap`; reset on success."""

    first: float = BACKOFF_FIRST_SECONDS
    cap: float = BACKOFF_CAP_SECONDS
    tries: int = 0

    def next(self) -> float:
        self.tries += 1
        return min(self.cap, self.first * 2.0 ** (self.tries - 1))

    def reset(self) -> None:
        self.tries = 0


@dataclass
class SyncState:
    """Which watches must list before the view is ready, which have, and which are out of sync now (since
    when, why). Thread-safe; logs one line per change of a watch's state."""

    expected: set[str] = field(default_factory=set)
    listed: set[str] = field(default_factory=set)
    failing: dict[str, tuple[float, str]] = field(default_factory=dict)  # watch -> (since, why)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def expect(self, name: str) -> None:
        with self.lock:
            self.expected.add(name)

    def synced(self, name: str, now: float) -> None:
        with self.lock:
            self.listed.add(name)
            was = self.failing.pop(name, None)
        if was is not None:
            log.info("watch %s: in sync again after %.1fs", name, now - was[0])

    def failed(self, name: str, why: str, now: float) -> None:
        with self.lock:
            was = self.failing.get(name)
            self.failing[name] = (was[0] if was is not None else now, why)
        if was is None:  # later failures change only the reason /readyz shows
            log.warning(
                "watch %s: out of sync (%s); retrying with backoff, not ready until it lists", name, why
            )

    @property
    def ready(self) -> bool:
        with self.lock:
            return bool(self.expected) and self.listed >= self.expected and not self.failing

    def problems(self) -> list[str]:
        """Why the view is not ready (empty when it is): watches never listed, watches out of sync."""
        with self.lock:
            never = sorted(self.expected - self.listed - set(self.failing))
            failing = sorted(self.failing.items())
        return [f"{name}: not listed yet" for name in never] + [
            f"{name}: out of sync since {time.monotonic() - since:.0f}s ago ({why})"
            for name, (since, why) in failing
        ]


@dataclass
class Handlers:
    """What one watch does with what it reads (called under the view's lock)."""

    clear: Callable[[], None]  # before a fresh list: forget what this watch had shown
    apply: Callable[[str, dict[str, Any]], None]  # one object: ADDED, MODIFIED or DELETED

    def take(self, name: str, kind: str, obj: dict[str, Any]) -> None:
        """One object; one that cannot be read is skipped with a line in the log (never the whole list)."""
        try:
            self.apply(kind, obj)
        except Exception as err:
            meta = obj.get("metadata") or {}
            log.warning(
                "watch %s: skipped %s/%s: %s", name, meta.get("namespace"), meta.get("name"), error_line(err)
            )


def run_watch(
    name: str,
    lister: Lister,
    handlers: Handlers,
    *,
    state: SyncState,
    lock: threading.Lock,
    changed: Callable[[], None],
    stopped: threading.Event,
    sleep: Callable[[float], bool] | None = None,
) -> None:
    """List, then watch from the list's resourceVersion; a watch the server ended resumes, an expired one
    lists again, and any failure marks the watch out of sync and lists again after a backoff. Until
    `stopped` is set."""
    wait = sleep or stopped.wait
    backoff = Backoff()
    while not stopped.is_set():
        try:
            items, version = list_raw(lister)
            with lock:
                handlers.clear()
                for item in items:
                    handlers.take(name, "ADDED", item)
            state.synced(name, time.monotonic())
            backoff.reset()
            changed()
            while not stopped.is_set():
                for event in watch_raw(lister, version):
                    obj = event.get("object")
                    if not isinstance(obj, dict):
                        continue
                    version = str((obj.get("metadata") or {}).get("resourceVersion") or version)
                    if event.get("type") in ("ADDED", "MODIFIED", "DELETED"):
                        with lock:
                            handlers.take(name, str(event["type"]), obj)
                        changed()
        except ExpiredError:
            continue  # list again at once: the watch was fine, only its version too old
        except Exception as err:  # the API server away, a timeout, a refusal: out of sync until it lists
            state.failed(name, error_line(err), time.monotonic())
            wait(backoff.next())
