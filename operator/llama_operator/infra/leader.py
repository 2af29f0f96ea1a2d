"""Leader election on a coordination.k8s.io Lease, as client-go does it: one instance reconciles and runs
the autoscaler; the others keep their watches warm and take over when the leader stops renewing.

Expiry is judged on this instance's own monotonic clock (when it last saw the lease change), never by
comparing the lease's timestamps with the local wall clock: clocks of two nodes may disagree.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import socket
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from llama_operator.api.times import micro_rfc3339

log = logging.getLogger(__name__)


def default_identity() -> str:
    return f"{socket.gethostname()}_{os.getpid()}_{uuid.uuid4().hex[:6]}"


@dataclass
class LeaseObserver:
    """Remembers when the lease record last changed, by the local monotonic clock."""

    record: tuple[str, str] | None = None  # (holder, renewTime) as last seen
    changed_at: float = 0.0

    def expired(self, holder: str, renew_time: str, lease_seconds: float, now: float) -> bool:
        """True when nobody holds the lease, or its holder has not renewed for `lease_seconds`."""
        if not holder:
            return True
        if (holder, renew_time) != self.record:
            self.record, self.changed_at = (holder, renew_time), now
            return False
        return now - self.changed_at >= lease_seconds


# HTTP statuses that retrying will not cure: the request itself is refused (RBAC, credentials, a missing
# namespace). 404 on a read and 409 on a write are part of the protocol and handled where they occur;
# 408 and 429 are the server asking for patience.
_TRANSIENT_4XX = frozenset({408, 429})
BACKOFF_MAX_SECONDS = 60.0


@dataclass(frozen=True)
class LeaseProblem:
    """Why this instance cannot take part in the election: one line for the log, the probe and an Event."""

    reason: str  # the API server's reason (Forbidden, Unauthorized, NotFound...), a metric label
    message: str


class LeaseRefusedError(Exception):
    """The API server refused a Lease request for good (a 4xx other than the protocol's own)."""

    def __init__(self, problem: LeaseProblem) -> None:
        super().__init__(problem.message)
        self.problem = problem


def _server_message(err: ApiException) -> str:
    """The API server's one-line message from a Status body (never the HTTP headers or the whole body)."""
    try:
        body = json.loads(err.body or "")
    except (TypeError, ValueError):
        body = None
    if isinstance(body, dict) and isinstance(body.get("message"), str):
        return str(body["message"])
    return str(err.reason or "")


def describe_refusal(err: ApiException, *, verb: str, namespace: str, name: str) -> LeaseProblem:
    """The problem a refused Lease request means, with the fix named."""
    reason = str(err.reason or f"HTTP{err.status}").replace(" ", "")
    what = f"cannot {verb} Lease {namespace}/{name}: {err.status} {_server_message(err)}"
    if err.status in {401, 403}:
        fix = (
            f"grant get, create and update on leases.coordination.k8s.io in namespace {namespace!r} to the "
            "operator's ServiceAccount (the chart's leader-election Role does, in its release namespace), or "
            "point the operator at the namespace it may use: --leader-election-namespace, "
            "LLAMA_OPERATOR_LEADER_ELECTION_NAMESPACE or config.leaderElectionNamespace"
        )
    elif err.status == 404:
        fix = f"create namespace {namespace!r} or set the operator's leader-election namespace to one that exists"
    else:
        fix = "check the operator's leader-election settings"
    return LeaseProblem(reason=reason, message=f"leader election blocked: {what}; {fix}")


def _is_refusal(err: ApiException) -> bool:
    return err.status is not None and 400 <= err.status < 500 and err.status not in _TRANSIENT_4XX


class LeaderElection:
    def __init__(
        self,
        api_client: client.ApiClient,
        *,
        namespace: str,
        name: str,
        identity: str | None = None,
        lease_seconds: float = 10.0,
        renew_seconds: float = 2.0,
        renew_deadline_seconds: float = 8.0,
        on_problem: Callable[[LeaseProblem | None], None] | None = None,
    ) -> None:
        self.api = client.CoordinationV1Api(api_client)
        self.namespace, self.name = namespace, name
        self.identity = identity or default_identity()
        self.lease_seconds, self.renew_seconds = lease_seconds, renew_seconds
        self.renew_deadline_seconds = renew_deadline_seconds
        self.observer = LeaseObserver()
        self.on_problem = on_problem  # told when a refusal starts (the problem) and ends (None)
        self.problem: LeaseProblem | None = None
        self.is_leader = False
        self.leading = asyncio.Event()  # set while this instance leads
        self._last_renewed = 0.0

    # --- one round, synchronous (runs in a thread) ----------------------------------------------
    def _body(self, lease: Any | None, *, acquire: bool) -> dict[str, Any]:
        now = micro_rfc3339(datetime.now(UTC))
        spec: dict[str, Any] = {
            "holderIdentity": self.identity,
            "leaseDurationSeconds": int(self.lease_seconds),
            "renewTime": now,
        }
        if acquire:
            previous = lease.spec.lease_transitions if lease is not None and lease.spec else None
            spec["acquireTime"] = now
            spec["leaseTransitions"] = (previous or 0) + (1 if lease is not None else 0)
        body: dict[str, Any] = {"metadata": {"name": self.name, "namespace": self.namespace}, "spec": spec}
        if lease is not None:
            body["metadata"]["resourceVersion"] = lease.metadata.resource_version  # compare-and-swap
        return body

    def try_acquire_or_renew(self) -> bool:
        """One attempt; True when this instance holds the lease afterwards. Writes are conditional on the
        resourceVersion read, so two candidates can never both win."""
        try:
            lease = self.api.read_namespaced_lease(self.name, self.namespace)
        except ApiException as err:
            if err.status != 404:
                raise self._refused(err, "get") from None
            try:
                self.api.create_namespaced_lease(self.namespace, self._body(None, acquire=True))
            except ApiException as create_err:
                if create_err.status == 409:
                    return False  # another instance created it first
                raise self._refused(create_err, "create") from None
            return True
        spec = lease.spec
        holder = (spec.holder_identity or "") if spec else ""
        renew = str(spec.renew_time) if spec and spec.renew_time else ""
        if holder != self.identity:
            seconds = float(spec.lease_duration_seconds or self.lease_seconds) if spec else self.lease_seconds
            if not self.observer.expired(holder, renew, seconds, time.monotonic()):
                return False
        try:
            self.api.replace_namespaced_lease(
                self.name, self.namespace, self._body(lease, acquire=holder != self.identity)
            )
        except ApiException as err:
            if err.status == 409:
                return False  # someone else renewed or took it since our read
            raise self._refused(err, "update") from None
        return True

    def _refused(self, err: ApiException, verb: str) -> Exception:
        """A refusal for good as LeaseRefusedError; anything else (5xx, 429) as it is, to be retried."""
        if _is_refusal(err):
            return LeaseRefusedError(
                describe_refusal(err, verb=verb, namespace=self.namespace, name=self.name)
            )
        retried: Exception = err  # ApiException is untyped (the client ships no stubs)
        return retried

    def release(self) -> None:
        """Give the lease up at shutdown so that a standby takes over at once, not after expiry."""
        if not self.is_leader:
            return
        try:
            lease = self.api.read_namespaced_lease(self.name, self.namespace)
            if lease.spec and lease.spec.holder_identity == self.identity:
                lease.spec.holder_identity = ""
                lease.spec.lease_duration_seconds = 1
                self.api.replace_namespaced_lease(self.name, self.namespace, lease)
        except ApiException as err:
            log.warning("could not release the leader lease: %s %s", err.status, err.reason)
        self._set(False)

    def _set(self, leading: bool) -> None:
        if leading and not self.is_leader:
            log.info("leader election: %s now leads (lease %s/%s)", self.identity, self.namespace, self.name)
            self.leading.set()
        elif not leading and self.is_leader:
            log.warning("leader election: %s stopped leading", self.identity)
            self.leading.clear()
        self.is_leader = leading

    # --- the loop -------------------------------------------------------------------------------
    def _report(self, problem: LeaseProblem | None) -> None:
        """Say a problem once when it starts or changes, and once when it is gone."""
        if problem == self.problem:
            return
        if problem is not None:
            log.error("%s", problem.message)
        else:
            log.info("leader election: lease %s/%s reachable again", self.namespace, self.name)
        self.problem = problem
        if self.on_problem is not None:
            self.on_problem(problem)

    async def run(self) -> None:
        loop = asyncio.get_running_loop()
        failures = 0  # consecutive failed rounds: the wait before the next one backs off
        while True:
            held: bool | None
            try:
                held = await loop.run_in_executor(None, self.try_acquire_or_renew)
                failures = 0
                self._report(None)
            except LeaseRefusedError as refused:  # retrying at once will not help: say why, back off
                failures += 1
                self._report(refused.problem)
                held = False if not self.is_leader else None
            except Exception as err:  # the API is unreachable or busy: keep trying, quietly, with backoff
                failures += 1
                level = logging.WARNING if failures == 3 else logging.DEBUG
                log.log(
                    level,
                    "leader election: lease %s/%s not reachable (%s); retrying",
                    self.namespace,
                    self.name,
                    _short_error(err),
                )
                held = False if not self.is_leader else None
            now = time.monotonic()
            if held:
                self._last_renewed = now
                self._set(True)
            elif self.is_leader and (held is False or now - self._last_renewed > self.renew_deadline_seconds):
                # Lost the lease, or could not renew in time: stop before another instance may start.
                self._set(False)
            await asyncio.sleep(self.retry_delay(failures))

    def retry_delay(self, failures: int) -> float:
        """The renew period while rounds succeed; doubling from it, up to a minute, while they fail. A
        leader that cannot renew still steps down by its deadline, which run() checks every round."""
        if failures == 0 or self.is_leader:
            return self.renew_seconds
        return float(min(BACKOFF_MAX_SECONDS, self.renew_seconds * 2 ** min(failures, 16)))


def _short_error(err: Exception) -> str:
    if isinstance(err, ApiException):
        return f"{err.status} {_server_message(err)}"
    return f"{type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''}"
