"""Drive a load through a running fleet simulator and watch the autoscaler follow it: the demo's load.

`drive()` sets a LlamaService's load (by default a slice of the bundled conversation trace, replayed
faster and thinned), then every few seconds prints one row: the offered rate and the TTFT p95 the
simulated replicas delivered (from the simulator), the TTFT and queue the operator observed through
Prometheus and its desired replicas (from the LlamaService status), and the Deployment's ready
replicas.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TextIO

from kubernetes import client, config

from llama_bench.fleetsim.client import FleetClient
from llama_bench.fleetsim.load import DEMO_LOAD, LoadSpec, cached_trace
from llama_operator.api.spec import GROUP, PLURAL, VERSION

IDLE = LoadSpec()


@dataclass(frozen=True, slots=True)
class DriveRow:
    """One line of the table."""

    elapsed: float  # seconds since the load was set
    offered_rate: float  # requests/s offered over the last 10 s
    ttft_p95: float | None  # seconds, what the simulated replicas delivered over the last 30 s
    observed_ttft: float | None  # seconds, the operator's TTFT at its SLO percentile (Prometheus)
    waiting: int  # requests waiting in the simulated replicas now
    desired: int | None  # the autoscaler's desired replicas
    replicas: int | None  # the Deployment's spec.replicas
    ready: int | None  # the Deployment's ready replicas


HEADER = (
    f"{'time':>6} {'offered':>8} {'TTFT p95':>9} {'observed':>9} {'queue':>6} "
    f"{'desired':>8} {'replicas':>9} {'ready':>6}"
)
UNITS = f"{'s':>6} {'req/s':>8} {'s':>9} {'s':>9} {'':>6} {'':>8} {'':>9} {'':>6}"


def _num(value: float | int | None, digits: int = 2) -> str:
    if value is None:
        return "-"
    return f"{value:.{digits}f}" if isinstance(value, float) else str(value)


def format_row(row: DriveRow) -> str:
    return (
        f"{row.elapsed:>6.0f} {row.offered_rate:>8.1f} {_num(row.ttft_p95):>9} {_num(row.observed_ttft):>9} "
        f"{row.waiting:>6} {_num(row.desired):>8} {_num(row.replicas):>9} {_num(row.ready):>6}"
    )


class _Cluster:
    def __init__(self, kubeconfig: str | None) -> None:
        self._api = config.new_client_from_config(config_file=kubeconfig)
        self._apps = client.AppsV1Api(self._api)
        self._custom = client.CustomObjectsApi(self._api)

    def read(self, namespace: str, name: str) -> tuple[dict[str, Any], dict[str, Any]]:
        def get(call: Callable[..., Any], *args: str) -> dict[str, Any]:
            try:
                data: dict[str, Any] = json.loads(call(*args, _preload_content=False).data)
            except client.ApiException:
                return {}
            return data

        svc = get(self._custom.get_namespaced_custom_object, GROUP, VERSION, namespace, PLURAL, name)
        deployment = get(self._apps.read_namespaced_deployment, name, namespace)
        return svc, deployment

    def close(self) -> None:
        self._api.close()


def drive(
    fleet_url: str,
    namespace: str,
    name: str,
    load: LoadSpec = DEMO_LOAD,
    *,
    seconds: float | None = None,
    warmup: float = 0.0,
    every: float = 5.0,
    kubeconfig: str | None = None,
    out: TextIO | None = sys.stdout,
    then: LoadSpec | None = IDLE,
) -> list[DriveRow]:
    """Offer `load` to LlamaService `namespace/name` through the fleet simulator at `fleet_url`, print a
    row every `every` seconds for `seconds` (default: the trace's replay time, else 60 s), then offer
    `then` (default: nothing; None leaves `load` running). Returns the rows.

    `warmup` seconds first offer a trace replay's opening rate as a steady Poisson load (rows with
    negative times), so the replicas start from what the trace's first minute needs rather than from
    one replica buried under a backlog (a cold start under full load is a burst the policy remembers)."""
    if seconds is None:
        seconds = _replay_seconds(load)
    fleet = FleetClient(fleet_url)
    cluster = _Cluster(kubeconfig)
    rows: list[DriveRow] = []
    if out is not None:
        out.write(f"{HEADER}\n{UNITS}\n")
        out.flush()

    def phase(spec: LoadSpec, length: float, shift: float) -> None:
        fleet.set_load(namespace, name, spec)
        start = time.monotonic()
        count = 0
        while True:
            elapsed = time.monotonic() - start
            row = _row(fleet, cluster, namespace, name, elapsed + shift)
            rows.append(row)
            count += 1
            if out is not None:
                out.write(format_row(row) + "\n")
                out.flush()
            if elapsed >= length:
                return
            time.sleep(max(0.0, min(every * count, length) - (time.monotonic() - start)))

    try:
        if warmup > 0:
            phase(opening_load(load), warmup - every, -warmup)
        phase(load, seconds, 0.0)
    finally:
        if then is not None:
            fleet.set_load(namespace, name, then)
        cluster.close()
    return rows


def opening_load(load: LoadSpec, trace_seconds: float = 60.0) -> LoadSpec:
    """A Poisson load at the rate a trace replay offers over its first `trace_seconds` of trace, with the
    trace's prompt and output lengths; `load` itself when it is not a replay."""
    if load.trace is None:
        return load
    trace = cached_trace(load.trace)
    count = sum(1 for r in trace.requests if load.offset <= r.arrival < load.offset + trace_seconds)
    rate = count * load.sample / (trace_seconds / load.speedup)
    return LoadSpec(rate=rate, lengths=load.trace, seed=load.seed)


def _replay_seconds(load: LoadSpec) -> float:
    if load.trace is None or load.loop:
        return 60.0
    trace = cached_trace(load.trace)
    end = trace.duration if load.duration is None else min(trace.duration, load.offset + load.duration)
    return max(0.0, end - load.offset) / load.speedup


def _row(fleet: FleetClient, cluster: _Cluster, namespace: str, name: str, elapsed: float) -> DriveRow:
    sim = fleet.service(namespace, name)
    svc, deployment = cluster.read(namespace, name)
    autoscaling = (svc.get("status") or {}).get("autoscaling") or {}
    spec_replicas = (deployment.get("spec") or {}).get("replicas")
    ready = (deployment.get("status") or {}).get("readyReplicas") if deployment else None
    return DriveRow(
        elapsed=elapsed,
        offered_rate=float(sim.get("offered_rate_10s") or 0.0),
        ttft_p95=sim.get("ttft_p95_30s"),
        observed_ttft=autoscaling.get("observedTtftSeconds"),
        waiting=int(sim.get("waiting") or 0),
        desired=autoscaling.get("desiredReplicas"),
        replicas=spec_replicas,
        ready=int(ready or 0) if deployment else None,
    )
