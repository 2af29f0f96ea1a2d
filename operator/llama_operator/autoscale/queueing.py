"""M/M/c queueing estimates: how many replicas keep a percentile of time-to-first-token under a bound.

Each replica is modelled as one server prefilling prompts at `capacity` tokens per second, so a
request's service time is its prompt length over that capacity (exponential around the observed
mean). TTFT is the waiting time plus the service time, which is what vLLM's TTFT histogram measures.
"""

from __future__ import annotations

import math


def erlang_c(servers: int, offered_load: float) -> float:
    """Probability that an arrival waits in an M/M/c queue (Erlang C), offered load a = lambda/mu.
    1.0 when the queue is unstable (a >= c)."""
    if offered_load <= 0:
        return 0.0
    if offered_load >= servers:
        return 1.0
    # Erlang B by its stable recurrence, then C from B.
    blocking = 1.0
    for k in range(1, servers + 1):
        blocking = offered_load * blocking / (k + offered_load * blocking)
    return servers * blocking / (servers - offered_load * (1.0 - blocking))


def response_time_tail(servers: int, arrival_rate: float, service_seconds: float, bound: float) -> float:
    """P(wait + service > bound) in an M/M/c queue with mean service time `service_seconds`."""
    if arrival_rate <= 0 or service_seconds <= 0:
        return 0.0
    mu = 1.0 / service_seconds
    offered = arrival_rate * service_seconds
    if offered >= servers:
        return 1.0
    waits = erlang_c(servers, offered)
    theta = servers * mu - arrival_rate  # rate of the exponential wait, given one waits
    service_tail = math.exp(-mu * bound)
    if abs(theta - mu) < 1e-9 * mu:
        # Sum of two exponentials of equal rate: Erlang-2 tail.
        waited_tail = math.exp(-mu * bound) * (1.0 + mu * bound)
    else:
        waited_tail = (theta * math.exp(-mu * bound) - mu * math.exp(-theta * bound)) / (theta - mu)
    return (1.0 - waits) * service_tail + waits * waited_tail


def waiting_time_tail(servers: int, arrival_rate: float, service_seconds: float, wait: float) -> float:
    """P(wait > `wait`) in an M/M/c queue: C(c, a) * exp(-(c * mu - lambda) * wait)."""
    if arrival_rate <= 0 or service_seconds <= 0:
        return 0.0
    offered = arrival_rate * service_seconds
    if offered >= servers:
        return 1.0
    theta = servers / service_seconds - arrival_rate
    return erlang_c(servers, offered) * math.exp(-theta * max(wait, 0.0))


def replicas_for_wait(
    arrival_rate: float, service_seconds: float, wait: float, tail: float, limit: int
) -> int | None:
    """Fewest servers with P(wait > `wait`) <= tail, or None when `limit` servers do not do it."""
    if arrival_rate <= 0 or service_seconds <= 0:
        return 0
    servers = max(1, math.floor(arrival_rate * service_seconds) + 1)
    while servers <= limit:
        if waiting_time_tail(servers, arrival_rate, service_seconds, wait) <= tail:
            return servers
        servers += 1
    return None
