"""Lease expiry is judged by this instance's monotonic clock, from when it last saw the lease change."""

from __future__ import annotations

from llama_operator.infra.leader import LeaseObserver


def test_a_lease_nobody_holds_is_free() -> None:
    assert LeaseObserver().expired("", "", 10, now=0)


def test_a_renewing_leader_keeps_it_and_a_silent_one_loses_it() -> None:
    observer = LeaseObserver()
    assert not observer.expired("a", "t1", 10, now=100)  # first sight: the clock starts now
    assert not observer.expired("a", "t1", 10, now=109)
    assert not observer.expired("a", "t2", 10, now=109.5)  # renewed: the clock restarts
    assert not observer.expired("a", "t2", 10, now=119)
    assert observer.expired("a", "t2", 10, now=119.6)


def test_the_leaders_wall_clock_is_never_compared_with_ours() -> None:
    observer = LeaseObserver()
    # A renewTime far in the past (a skewed clock) is not "expired" while it keeps changing.
    assert not observer.expired("a", "1970-01-01T00:00:00Z", 10, now=0)
    assert not observer.expired("a", "1970-01-01T00:00:02Z", 10, now=15)
