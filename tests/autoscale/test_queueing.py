from __future__ import annotations

import pytest

from llama_operator.autoscale.queueing import erlang_c, replicas_for_wait, waiting_time_tail


def test_erlang_c_known_values() -> None:
    assert erlang_c(1, 0.5) == pytest.approx(0.5)  # M/M/1: P(wait) = rho
    assert erlang_c(2, 1.0) == pytest.approx(1 / 3)
    assert erlang_c(3, 3.0) == 1.0
    assert erlang_c(3, 0.0) == 0.0


def test_more_servers_never_wait_longer() -> None:
    tails = [waiting_time_tail(c, 10.0, 0.25, 0.3) for c in range(1, 10)]
    assert tails == sorted(tails, reverse=True)
    assert tails[0] == 1.0  # offered load 2.5 on 1 or 2 servers: unstable


def test_replicas_for_wait_is_the_smallest_that_meets_the_tail() -> None:
    servers = replicas_for_wait(20.0, 0.2, 0.3, 0.05, limit=100)
    assert servers is not None
    assert waiting_time_tail(servers, 20.0, 0.2, 0.3) <= 0.05
    assert waiting_time_tail(servers - 1, 20.0, 0.2, 0.3) > 0.05
    assert replicas_for_wait(20.0, 0.2, 0.3, 0.05, limit=4) is None
    assert replicas_for_wait(0.0, 0.2, 0.3, 0.05, limit=4) == 0
