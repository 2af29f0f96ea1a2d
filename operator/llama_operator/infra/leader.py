"""Leader election on a coordination.k8s.io Lease, as client-go does it: one instance reconciles and runs
the autoscaler; the others keep their watches warm and take over when the leader stops renewing.

Expiry is judged on this instance's own monotonic clock (when it last saw the lease change), never by
comparing the lease's timestamps with the local wall clock: clocks of two nodes may disagree.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import time
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException

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


def _micro_time(t: datetime) -> str:
    return t.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


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
    ) -> None:
        self.api = client.CoordinationV1Api(api_client)
        self.namespace, self.name = namespace, name
        self.identity = identity or default_identity()
        self.lease_seconds, self.renew_seconds = lease_seconds, renew_seconds
        self.renew_deadline_seconds = renew_deadline_seconds
        self.observer = LeaseObserver()
        self.is_leader = False
        self.leading = asyncio.Event()  # set while this instance leads
        self._last_renewed = 0.0

    # --- one round, synchronous (runs in a thread) ----------------------------------------------
    def _body(self, lease: Any | None, *, acquire: bool) -> dict[str, Any]:
        now = _micro_time(datetime.now(UTC))
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
                raise
            try:
                self.api.create_namespaced_lease(self.namespace, self._body(None, acquire=True))
            except ApiException as create_err:
                if create_err.status == 409:
                    return False  # another instance created it first
                raise
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
            raise
        return True

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
    async def run(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            held: bool | None
            try:
                held = await loop.run_in_executor(None, self.try_acquire_or_renew)
            except Exception as err:  # the API is unreachable: keep trying, step down after the deadline
                log.warning("leader election: %s", err)
                held = False if not self.is_leader else None
            now = time.monotonic()
            if held:
                self._last_renewed = now
                self._set(True)
            elif self.is_leader and (held is False or now - self._last_renewed > self.renew_deadline_seconds):
                # Lost the lease, or could not renew in time: stop before another instance may start.
                self._set(False)
            await asyncio.sleep(self.renew_seconds)
