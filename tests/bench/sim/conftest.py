from __future__ import annotations

import argparse
import random

import pytest

from llama_bench.sim.accelerators import replica_profile
from llama_bench.sim.commands import register
from llama_bench.sim.trace import Trace, TraceRequest

# The simulated replica most of these tests run on: the catalog's T4 serving its default model.
T4 = replica_profile("t4")


def synthetic_trace(seconds: float = 300.0, rate: float = 3.0, seed: int = 7) -> Trace:
    """Poisson arrivals with prompt and output lengths like the conversation trace's."""
    rng = random.Random(seed)
    requests = []
    t = 0.0
    while True:
        t += rng.expovariate(rate)
        if t > seconds:
            break
        requests.append(TraceRequest(t, rng.randint(100, 3000), rng.randint(1, 300)))
    return Trace("synthetic", tuple(requests))


@pytest.fixture
def small_trace() -> Trace:
    return synthetic_trace()


def call(argv: list[str]) -> int:
    """The bench's simulator commands as `llama-bench` runs them; their exit code."""
    parser = argparse.ArgumentParser(prog="llama-operator")
    register(parser.add_subparsers(required=True))
    args = parser.parse_args(argv)
    code: int = args.func(args)
    return code
