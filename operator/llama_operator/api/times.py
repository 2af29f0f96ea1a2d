"""Times as Kubernetes writes them: RFC 3339 in UTC with a Z, to the second (metav1.Time: conditions,
events) or to the microsecond (metav1.MicroTime: Leases; and the autoscaler's times in status, whose
arithmetic keeps its precision through a round trip). The one place they are formatted."""

from __future__ import annotations

from datetime import UTC, datetime


def rfc3339(t: datetime) -> str:
    """A UTC datetime to the second: 2026-01-02T03:04:05Z."""
    return t.strftime("%Y-%m-%dT%H:%M:%SZ")


def micro_rfc3339(t: datetime | float) -> str:
    """A UTC datetime, or unix seconds, to the microsecond: 2026-01-02T03:04:05.000006Z."""
    when = datetime.fromtimestamp(t, UTC) if isinstance(t, int | float) else t
    return when.strftime("%Y-%m-%dT%H:%M:%S.%fZ")
