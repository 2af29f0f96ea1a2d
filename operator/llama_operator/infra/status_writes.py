"""When the autoscaler writes a LlamaService's status: at once for news (a decision, the policy's state, a
condition's status or reason), at a bounded rate for observations alone, and never for nothing, so that 1,000
idle services cost no writes. It reads the status as stored and the patch as it will be written.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from enum import Enum
from typing import Any, TypeVar

from llama_operator.api.conditions import (
    conditions_of,
)

K = TypeVar("K")
_EPOCH = datetime.fromtimestamp(0, UTC)


# What in the autoscaler's status is a decision or a transition (written as soon as it changes), as
# against observations and the stabilization history, which change every cycle under load and are
# refreshed at a bounded rate (and kept in memory between refreshes).
_OBSERVATIONS = frozenset(
    {
        "observedTtftSeconds",
        "observedTpotSeconds",
        "ttft",
        "tpot",
        "observedQueueDepth",
        "observedQueuePerReplica",
        "observedRequestRate",
        "lastReason",
        "lastEvaluationTime",
    }
)


def _decisions(status: Mapping[str, Any] | None) -> Any:
    status = status or {}
    autoscaling = dict(status.get("autoscaling") or {})
    state = {k: v for k, v in (autoscaling.get("state") or {}).items() if v is not None}  # null: unset
    state.pop("recommendations", None)
    # The error budget's counts move with every request: an observation, refreshed at the bounded rate (its
    # sizing share moves slowly, and rides along).
    state.pop("errorBudget", None)
    core = {k: v for k, v in autoscaling.items() if k not in _OBSERVATIONS and k != "state"}
    conditions = sorted((c.type, str(c.status), c.reason) for c in conditions_of(status))
    return core, state, conditions


def _observations(status: Mapping[str, Any] | None) -> Any:
    # The reason's and the conditions' wording and the clock ("idle for 35s") are not news: they
    # ride along with a write that something else causes, so 1,000 idle services write nothing at all.
    autoscaling = (status or {}).get("autoscaling") or {}
    observed = {k: autoscaling.get(k) for k in _OBSERVATIONS if k not in {"lastEvaluationTime", "lastReason"}}
    state = autoscaling.get("state") or {}
    return observed, state.get("recommendations"), state.get("errorBudget")


class StatusWrite(Enum):
    """Why the autoscaler's status patch is worth writing."""

    NEWS = "news"  # a decision, the policy's state or a condition moved: written at once
    REFRESH = "refresh"  # only observations, older than the refresh period: written within a fleet budget


def status_write(
    current: Mapping[str, Any] | None, patch: Mapping[str, Any], *, now: datetime, refresh_seconds: float
) -> StatusWrite | None:
    """Write the autoscaler's status patch? NEWS when a decision, the policy's state or a condition's
    status or reason changes; REFRESH when only observations changed and the written ones are at least
    `refresh_seconds` old; None when nothing changed (1,000 idle services cost no writes)."""
    merged = {**(current or {}), **patch}
    if _decisions(merged) != _decisions(current):
        return StatusWrite.NEWS
    if _observations(merged) == _observations(current):
        return None
    written = last_evaluation_time(current)
    if written is None or (now - written).total_seconds() >= refresh_seconds:
        return StatusWrite.REFRESH
    return None


def last_evaluation_time(status: Mapping[str, Any] | None) -> datetime | None:
    """When the observations in status were written (None: never, or unreadable)."""
    last = ((status or {}).get("autoscaling") or {}).get("lastEvaluationTime")
    if not last:
        return None
    try:
        return datetime.fromisoformat(str(last).replace("Z", "+00:00"))
    except ValueError:
        return None


def refresh_budget(*, refreshes_per_second: float, cycle_seconds: float) -> int:
    """Observation refreshes one autoscaler cycle may write, for the whole fleet: 1,000 services served
    at a 60 s refresh would otherwise write 17 statuses a second, every one inside the cycle that also
    carries the scaling decisions. At least one, so every service is refreshed eventually."""
    return max(1, math.floor(refreshes_per_second * cycle_seconds))


def pick_refreshes(due: Sequence[tuple[datetime | None, K]], budget: int) -> list[K]:
    """The `budget` refreshes whose written observations are oldest (never written first): a backlog
    is served round-robin, each service's turn coming back once the older ones are written."""
    oldest_first = sorted(due, key=lambda item: (item[0] is not None, item[0] or _EPOCH))
    return [key for _, key in oldest_first[: max(0, budget)]]
