"""Scale benchmark (`make scale-bench`): N LlamaServices on the local cluster, one operator process.

Prints, and writes to --out (results.json, table.md, convergence.png):
- the time to create the N objects and the time until every one has converged (its Service and Deployment
  exist and its status records the current generation);
- the operator's peak RSS (VmHWM) and its memory after convergence;
- API writes per LlamaService, from the API server's own request counters (apiserver_request_total),
  split by resource and verb: creates, applies and status patches, and DELETEs;
- a second pass over the same N services with nothing changed (a resync) to show it writes nothing;
- the time to delete them all and for the garbage collector to remove what they owned.

With --autoscaled (`make scale-bench ARGS=--autoscaled`), the services are autoscaled and the operator is
measured twice at rest: first with no metrics (their pods pending: the cluster has no L4), then with a kwok
node pool that fits every replica and the fleet simulator serving every pod's vLLM metrics under a light
load. It prints the operator's CPU share, Prometheus queries and API writes per autoscaler cycle in each,
the decision latency (a load step on one more service to its replica patch) with all N served, and where
the operator's memory goes (tracemalloc, in the restarted operator: memory-<pid>.txt and the table).

A benchmark, not a test: it prints figures and asserts nothing. The LlamaServices run 0 replicas, so the
figures are the operator's and the API server's, not kwok's pods.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import os
import re
import sys
import time
import urllib.request
import uuid
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

from kubernetes import client, config

from fleet import FleetProcess
from llama_bench.fleetsim.load import LoadSpec
from localcluster import info as cluster_info
from support import Cluster, OperatorProcess, kwok_gpu_node

GROUP, VERSION, PLURAL = "serving.llama-operator.dev", "v1alpha1", "llamaservices"
WRITE_VERBS = ("POST", "PUT", "PATCH", "APPLY", "DELETE")
# What the operator writes; the controllers' own writes (ReplicaSets, Deployment status) and the
# benchmark's own creates of LlamaServices are not counted.
OPERATOR_RESOURCES = {
    ("services", ""),
    ("deployments", ""),
    ("poddisruptionbudgets", ""),
    ("podmonitors", ""),
    ("llamaservices", "status"),
}
# Events are left out: the scheduler posts and patches them for pending pods, and the counters cannot
# tell whose they are (the operator posts one per problem or decision).
_SAMPLE = re.compile(r"^apiserver_request_total\{(?P<labels>[^}]*)\} (?P<value>[0-9.e+]+)$")


def request_counts(api: client.ApiClient) -> Counter[tuple[str, str, str]]:
    """(resource, subresource, verb) -> requests served so far, writes only, successes and failures."""
    text = api.call_api("/metrics", "GET", auth_settings=["BearerToken"], _preload_content=False)[
        0
    ].data.decode()
    counts: Counter[tuple[str, str, str]] = Counter()
    for line in text.splitlines():
        match = _SAMPLE.match(line)
        if not match:
            continue
        labels = dict(re.findall(r'(\w+)="([^"]*)"', match.group("labels")))
        if labels.get("verb") in WRITE_VERBS:
            key = (labels.get("resource", ""), labels.get("subresource", ""), labels["verb"])
            counts[key] += int(float(match.group("value")))
    return counts


def operator_writes(
    before: Counter[tuple[str, str, str]], after: Counter[tuple[str, str, str]]
) -> dict[str, int]:
    out: dict[str, int] = {}
    for (resource, sub, verb), value in (after - before).items():
        if (resource, sub) in OPERATOR_RESOURCES and value:
            out[f"{verb} {resource}{'/' + sub if sub else ''}"] = value
    return dict(sorted(out.items()))


def manifest(name: str, *, autoscaled: bool) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "model": {"name": "meta-llama/Llama-3.2-1B-Instruct"},
        "accelerator": {"type": "a10g"},
    }
    if autoscaled:  # one replica each, pending (the cluster has no L4): no metrics, ever
        spec["autoscaling"] = {"minReplicas": 1, "maxReplicas": 2}
        spec["accelerator"] = {"type": "l4"}
    else:
        spec["replicas"] = 0
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "LlamaService",
        "metadata": {"name": name},
        "spec": spec,
    }


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime + stime


def prometheus_queries(url: str) -> int:
    """Instant queries Prometheus has answered (its own counter)."""
    with urllib.request.urlopen(f"{url}/metrics", timeout=10) as response:
        text = response.read().decode()
    total = 0
    for line in text.splitlines():
        if line.startswith("prometheus_http_requests_total{") and 'handler="/api/v1/query"' in line:
            total += int(float(line.rsplit(" ", 1)[1]))
    return total


PROBE = {
    "apiVersion": f"{GROUP}/{VERSION}",
    "kind": "LlamaService",
    "metadata": {"name": "probe"},
    "spec": {
        "model": {"name": "meta-llama/Llama-3.2-1B-Instruct"},
        "accelerator": {"type": "a100-80gb", "mig": "1g.10gb"},
        "autoscaling": {"minReplicas": 1, "maxReplicas": 4, "slo": {"ttftSeconds": 0.5}},
    },
}


def decision_latency(api: client.ApiClient, fleet: FleetProcess, namespace: str) -> dict[str, Any]:
    """One more autoscaled LlamaService, its pod served by the fleet simulator: the seconds from a load
    step to the replica patch, while the loop also decides for the N others."""
    custom, apps = client.CustomObjectsApi(api), client.AppsV1Api(api)
    fleet.client.set_load(
        namespace, "probe", LoadSpec(rate=1.0, prompt_tokens=1000, output_tokens=32, seed=11)
    )
    custom.create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, PROBE)

    def observed() -> bool:
        status = (
            custom.get_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, "probe").get("status")
            or {}
        )
        return (status.get("autoscaling") or {}).get("observedTtftSeconds") is not None

    deadline = time.monotonic() + 300
    while not observed():
        if time.monotonic() > deadline:
            return {"error": "the probe's signals never arrived"}
        time.sleep(1)
    step = time.monotonic()
    fleet.client.set_load(
        namespace, "probe", LoadSpec(rate=20.0, prompt_tokens=1000, output_tokens=32, seed=12)
    )
    while time.monotonic() - step < 120:
        if (apps.read_namespaced_deployment("probe", namespace).spec.replicas or 0) > 1:
            return {"seconds_from_load_step_to_replica_patch": round(time.monotonic() - step, 1)}
        time.sleep(0.5)
    return {"error": "no scale-up within 120 s"}


# A light load on every served service (the fleet simulator's default for them): enough for the signals
# to move (observations refreshed at their bounded rate), cheap enough for the simulator on 2 cores.
SERVED_LOAD = {"default": {"rate": 0.2, "prompt_tokens": 500, "output_tokens": 50}}


def l4_pool(pods: int) -> dict[str, Any]:
    """A kwok node that fits every autoscaled replica (they ask for an L4): what makes them run."""
    labels = {
        "nvidia.com/gpu.present": "true",
        "nvidia.com/gpu.product": "NVIDIA-L4",
        "nvidia.com/gpu.memory": "23034",
        "nvidia.com/gpu.count": str(pods),
        "nvidia.com/mig.capable": "false",
    }
    capacity = {
        "cpu": str(16 * pods),
        "memory": f"{64 * pods}Gi",
        "pods": str(pods),
        "ephemeral-storage": f"{100 * pods}Gi",
        "nvidia.com/gpu": str(pods),
    }
    return kwok_gpu_node("bench-l4-pool", labels, capacity)


def poll_progress(
    progress: Callable[[], tuple[bool, str]], pid: int, timeout: float, interval: float
) -> float:
    """Call `progress` (done?, a line to print) until done or `timeout`; the seconds it took."""
    start = time.monotonic()
    while time.monotonic() - start < timeout:
        done, line = progress()
        print(
            f"    {time.monotonic() - start:6.1f}s  {line}, operator RSS {rss_kib(pid, 'VmRSS') / 1024:.0f} MiB",
            flush=True,
        )
        if done:
            break
        time.sleep(interval)
    return time.monotonic() - start


def llamaservice_statuses(
    api: client.ApiClient, namespace: str, names: set[str]
) -> dict[str, dict[str, Any]]:
    items = client.CustomObjectsApi(api).list_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL)[
        "items"
    ]
    return {
        item["metadata"]["name"]: item.get("status") or {}
        for item in items
        if item["metadata"]["name"] in names
    }


def condition_status(status: dict[str, Any], kind: str) -> str | None:
    return next((c.get("status") for c in status.get("conditions") or [] if c.get("type") == kind), None)


def active(status: dict[str, Any]) -> bool:
    return condition_status(status, "ScalingActive") == "True"


def slo_judged(status: dict[str, Any]) -> bool:
    return condition_status(status, "SLOMet") in {"True", "False"}


def wait_served(api: client.ApiClient, namespace: str, names: set[str], pid: int, timeout: float) -> float:
    """Until every service has a ready replica, the autoscaler has seen its metrics and judged its SLO
    (SLOMet True or False: the first requests' TTFT); the seconds. Until then, each service still has its
    first transitions to write, which are not "at rest"."""
    apps = client.AppsV1Api(api)
    judged: set[str] = set()

    def progress() -> tuple[bool, str]:
        ready = sum(
            1
            for d in apps.list_namespaced_deployment(namespace).items
            if d.metadata.name in names and (d.status.ready_replicas or 0) > 0
        )
        statuses = llamaservice_statuses(api, namespace, names)
        seen = sum(1 for status in statuses.values() if active(status))
        # Once judged, a service's first transitions are done (a later window without a request may make
        # it Unknown again: that flap is part of what is measured at rest).
        judged.update(name for name, status in statuses.items() if slo_judged(status))
        return len(judged) == len(names), (
            f"{ready}/{len(names)} with a ready replica, {seen}/{len(names)} with metrics seen, "
            f"{len(judged)}/{len(names)} with the SLO judged"
        )

    return poll_progress(progress, pid, timeout, interval=5)


def wait_autoscaler_settled(
    api: client.ApiClient, namespace: str, names: set[str], pid: int, timeout: float
) -> float:
    """Until the autoscaler has written its first conditions for every service (it runs after the reconcile
    that makes a service "converged"): at rest means nothing left to write. The seconds it took."""

    def progress() -> tuple[bool, str]:
        settled = sum(
            1
            for status in llamaservice_statuses(api, namespace, names).values()
            if condition_status(status, "ScalingActive") is not None
        )
        return settled == len(names), f"{settled}/{len(names)} with the autoscaler's conditions"

    return poll_progress(progress, pid, timeout, interval=3)


def memory_profile(path: Path, top: int = 8) -> list[str]:
    """The profile's headline and its largest source lines (written by the operator when it stops)."""
    if not path.exists():
        return [f"no memory profile at {path}"]
    lines = path.read_text().splitlines()
    return [lines[0], *(line.strip() for line in lines[1 : top + 1])]


def autoscaler_cycles(metrics_url: str) -> tuple[float, float]:
    """(cycles run, seconds they took in all), from the operator's own histogram."""
    with urllib.request.urlopen(metrics_url, timeout=10) as response:
        text = response.read().decode()
    values = {}
    for line in text.splitlines():
        if line.startswith("llama_operator_autoscaler_cycle_duration_seconds_"):
            name, value = line.rsplit(" ", 1)
            values[name] = float(value)
    return (
        values.get("llama_operator_autoscaler_cycle_duration_seconds_count", 0.0),
        values.get("llama_operator_autoscaler_cycle_duration_seconds_sum", 0.0),
    )


def at_rest(
    api: client.ApiClient, operator: OperatorProcess, prometheus_url: str, seconds: float
) -> dict[str, Any]:
    """The operator with N autoscaled services and nothing new: CPU share, and per autoscaler cycle (as the
    operator counts them) the Prometheus queries and API writes."""
    assert operator.proc is not None
    pid, metrics_url = operator.proc.pid, f"http://127.0.0.1:{operator.metrics_port}/metrics"
    writes_before, queries_before, cpu_before, cycles_before = (
        request_counts(api),
        prometheus_queries(prometheus_url),
        cpu_seconds(pid),
        autoscaler_cycles(metrics_url),
    )
    start = time.monotonic()
    time.sleep(seconds)
    elapsed = time.monotonic() - start
    cycles_after = autoscaler_cycles(metrics_url)
    cycles = max(1.0, cycles_after[0] - cycles_before[0])
    writes = operator_writes(writes_before, request_counts(api))
    return {
        "seconds": round(elapsed, 1),
        "cycles": int(cycles),
        "cycle_seconds_mean": round((cycles_after[1] - cycles_before[1]) / cycles, 2),
        "cpu_share_of_a_core": round((cpu_seconds(pid) - cpu_before) / elapsed, 3),
        "prometheus_queries_per_cycle": round(
            (prometheus_queries(prometheus_url) - queries_before) / cycles, 2
        ),
        "writes_per_cycle": round(sum(writes.values()) / cycles, 2),
        "writes": writes,
    }


def rss_kib(pid: int, field: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(f"{field}:"):
            return int(line.split()[1])
    return 0


def converged(api: client.ApiClient, namespace: str, names: set[str]) -> int:
    custom = client.CustomObjectsApi(api)
    apps = client.AppsV1Api(api)
    items = custom.list_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL)["items"]
    deployments = {d.metadata.name for d in apps.list_namespaced_deployment(namespace).items}
    done = 0
    for item in items:
        status = item.get("status") or {}
        meta = item["metadata"]
        if (
            meta["name"] in names
            and meta["name"] in deployments
            and status.get("observedGeneration") == meta["generation"]
        ):
            done += 1
    return done


def plot(timeline: list[tuple[float, int]], n: int, path: Path) -> None:
    try:
        import matplotlib  # noqa: PLC0415 - optional

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt  # noqa: PLC0415
    except ImportError:
        return
    fig, ax = plt.subplots(figsize=(7, 4))
    ax.plot([t for t, _ in timeline], [c for _, c in timeline], color="black", linewidth=2)
    ax.axhline(n, color="grey", linestyle=":")
    ax.set_xlabel("seconds since the first LlamaService was created")
    ax.set_ylabel("LlamaServices converged")
    ax.set_title(f"{n} LlamaServices, one operator, 2 cores")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--services", type=int, default=1000)
    parser.add_argument("--out", default="bench-out/scale")
    parser.add_argument("--timeout", type=float, default=900)
    parser.add_argument(
        "--autoscaled", action="store_true", help="autoscaled services; then measure the operator at rest"
    )
    parser.add_argument("--rest-seconds", type=float, default=60)
    parser.add_argument(
        "--profile-memory",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="trace the restarted operator's allocations (tracemalloc; the first, measured one runs without "
        "it): memory-<pid>.txt in --out and the table",
    )
    parser.add_argument(
        "--served-timeout", type=float, default=900, help="seconds for every pod to be served"
    )
    args = parser.parse_args(argv)
    loaded = cluster_info.load()
    if loaded is None:
        print("no local cluster: run `make cluster-up`", file=sys.stderr)
        return 2
    cluster = Cluster(loaded)
    cluster.kubectl(
        "apply",
        "--server-side",
        "--force-conflicts",
        "-f",
        "crds/llamaservices.serving.llama-operator.dev.yaml",
    )
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    api = config.new_client_from_config(str(loaded.kubeconfig))
    api.configuration.connection_pool_maxsize = 16
    namespace = f"scale-{uuid.uuid4().hex[:6]}"
    cluster.kubectl("create", "namespace", namespace)
    names = {f"svc-{i:04d}" for i in range(args.services)}
    interval = 5.0  # the chart's default autoscaler interval
    operator = OperatorProcess(
        cluster,
        log_dir=out,
        extra_env={
            "LLAMA_OPERATOR_LEADER_ELECTION_LEASE": f"bench-{namespace}",
            "LLAMA_OPERATOR_AUTOSCALE_INTERVAL_SECONDS": str(interval),
            "MALLOC_ARENA_MAX": "2",  # as the chart runs it
        },
        quiet=True,
    )
    operator.start()
    assert operator.proc is not None
    pid = operator.proc.pid
    rss_idle = rss_kib(pid, "VmRSS")
    custom = client.CustomObjectsApi(api)
    before = request_counts(api)
    print(f"==> creating {args.services} LlamaServices in {namespace}", flush=True)
    start = time.monotonic()
    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        list(
            pool.map(
                lambda n: custom.create_namespaced_custom_object(
                    GROUP, VERSION, namespace, PLURAL, manifest(n, autoscaled=args.autoscaled)
                ),
                sorted(names),
            )
        )
    created = time.monotonic() - start
    print(f"    created in {created:.1f}s", flush=True)
    timeline: list[tuple[float, int]] = []
    done = 0
    while done < args.services and time.monotonic() - start < args.timeout:
        done = converged(api, namespace, names)
        timeline.append((time.monotonic() - start, done))
        print(
            f"    {timeline[-1][0]:6.1f}s  {done}/{args.services} converged, operator RSS {rss_kib(pid, 'VmRSS') / 1024:.0f} MiB",
            flush=True,
        )
        if done < args.services:
            time.sleep(2)
    converge = time.monotonic() - start
    time.sleep(10)  # let the last status writes and their echoes settle
    after_converge = request_counts(api)
    writes = operator_writes(before, after_converge)
    rss_peak, rss_after = rss_kib(pid, "VmHWM"), rss_kib(pid, "VmRSS")

    rest: dict[str, Any] | None = None
    if args.autoscaled:
        print("==> waiting for the autoscaler's first conditions on every service", flush=True)
        autoscaler_settled = wait_autoscaler_settled(api, namespace, names, pid, args.timeout)
        time.sleep(10)  # the last writes' echoes
        print(
            f"==> {args.services} autoscaled services at rest (no metrics) for {args.rest_seconds:.0f}s",
            flush=True,
        )
        rest = at_rest(api, operator, loaded.prometheus_url, args.rest_seconds)
        rest["seconds_until_autoscaler_conditions"] = round(autoscaler_settled, 1)
        print(f"    {json.dumps(rest)}", flush=True)
        rss_peak = max(rss_peak, rss_kib(pid, "VmHWM"))
    settle = max(30.0, args.services * 0.05)
    print("==> a resync with nothing changed (operator restarted: every key is reconciled again)", flush=True)
    before_resync = request_counts(api)
    operator.restart()
    time.sleep(settle)
    resync_writes = operator_writes(before_resync, request_counts(api))
    print(f"    writes: {json.dumps(resync_writes)}", flush=True)
    assert operator.proc is not None
    pid = operator.proc.pid  # the restarted one: its peak (every object listed at once) counts too

    def profile_memory() -> list[str]:
        """The operator restarted once more under tracemalloc; its profile, written at its stop while every
        service is still there."""
        if not args.profile_memory:
            return []
        operator.extra_env["LLAMA_OPERATOR_TRACEMALLOC_FILE"] = str(out.resolve() / "memory-{pid}.txt")
        operator.restart()
        assert operator.proc is not None
        traced = operator.proc.pid
        time.sleep(settle)
        # Under tracemalloc, with N services, kopf's shutdown takes longer than the usual grace: the
        # profile is written by the clean-up handler, which a SIGKILL would skip.
        operator.stop(timeout=300)
        found = memory_profile(out / f"memory-{traced}.txt")
        print(
            "==> memory profile (tracemalloc, operator restarted):\n    " + "\n    ".join(found), flush=True
        )
        return found

    profile: list[str] = []
    if rest is not None:
        load_file = out / "served-load.json"
        load_file.write_text(json.dumps(SERVED_LOAD))
        # The simulator lists every pod and LlamaService each poll (two lists of N objects): once a second
        # at N = 1,000 is 10 MB of JSON a second through the API server, which the 2 cores also need.
        poll = max(1.0, args.services / 200)
        fleet = FleetProcess(
            loaded, log_dir=out, extra_args=[f"--load-file={load_file}", f"--poll-interval={poll:g}"]
        )
        fleet.start()
        try:
            print(
                f"==> with metrics: a kwok node pool fits all {args.services} replicas, the fleet simulator "
                f"serves them ({json.dumps(SERVED_LOAD['default'])} each)",
                flush=True,
            )
            cluster.kubectl("apply", "-f", "-", input_text=json.dumps(l4_pool(args.services + 10)))
            served_seconds = wait_served(api, namespace, names, pid, args.served_timeout)
            print(
                f"==> {args.services} served autoscaled services at rest for {args.rest_seconds:.0f}s",
                flush=True,
            )
            served = at_rest(api, operator, loaded.prometheus_url, args.rest_seconds)
            served["seconds_until_all_served"] = round(served_seconds, 1)
            print(f"    {json.dumps(served)}", flush=True)
            print("==> decision latency: a load step on one more service, all N served", flush=True)
            served["decision_latency"] = decision_latency(api, fleet, namespace)
            print(f"    {json.dumps(served['decision_latency'])}", flush=True)
            rest["served"] = served
            rss_peak = max(rss_peak, rss_kib(pid, "VmHWM"))
            rss_after = rss_kib(pid, "VmRSS")
            profile = profile_memory()
        finally:
            fleet.stop()
    else:
        rss_peak = max(rss_peak, rss_kib(pid, "VmHWM"))
        profile = profile_memory()

    print("==> deleting them all", flush=True)
    start_delete = time.monotonic()
    cluster.kubectl("delete", "namespace", namespace, "--wait=false")
    core = client.CoreV1Api(api)
    while any(ns.metadata.name == namespace for ns in core.list_namespace().items):
        time.sleep(2)
    deleted = time.monotonic() - start_delete
    operator.stop()
    if args.autoscaled:
        cluster.kubectl("delete", "node", "bench-l4-pool", "--ignore-not-found")

    total_writes = sum(writes.values())
    results = {
        "services": args.services,
        "create_seconds": round(created, 1),
        "converge_seconds": round(converge, 1),
        "converged": done,
        "operator_rss_peak_mib": round(rss_peak / 1024, 1),
        "operator_rss_after_mib": round(rss_after / 1024, 1),
        "operator_rss_idle_mib": round(rss_idle / 1024, 1),
        "writes": writes,
        "writes_per_service": round(total_writes / max(1, args.services), 2),
        "resync_writes": resync_writes,
        "delete_and_gc_seconds": round(deleted, 1),
        "autoscaled": args.autoscaled,
        "at_rest": rest,
        "memory_profile": profile,
    }
    (out / "results.json").write_text(json.dumps(results, indent=2) + "\n")
    table = [
        "| figure | value |",
        "|---|---|",
        f"| LlamaServices | {args.services} |",
        f"| created in | {created:.1f} s |",
        f"| converged (Service, Deployment, status) in | {converge:.1f} s ({done}/{args.services}) |",
        f"| operator peak RSS | {rss_peak / 1024:.0f} MiB (idle {rss_idle / 1024:.0f}, after {rss_after / 1024:.0f}) |",
        f"| operator writes per LlamaService | {total_writes / max(1, args.services):.2f} |",
        *[f"| &nbsp;&nbsp;{k} | {v} |" for k, v in writes.items()],
        f"| writes in a resync with nothing changed | {sum(resync_writes.values())} |",
        f"| delete namespace + garbage collection | {deleted:.1f} s |",
    ]
    if rest is not None:
        table += [
            f"| autoscaler's first conditions on every service, after convergence | {rest['seconds_until_autoscaler_conditions']:.0f} s |",
            f"| no metrics, at rest ({rest['seconds']:.0f} s): operator CPU | {100 * rest['cpu_share_of_a_core']:.1f} % of a core |",
            f"| no metrics: Prometheus queries per autoscaler cycle | {rest['prometheus_queries_per_cycle']} |",
            f"| no metrics: API writes per cycle | {rest['writes_per_cycle']} |",
        ]
        served = rest["served"]
        latency = served["decision_latency"]
        table += [
            f"| served (all {args.services} pods scraped, light load) after | {served['seconds_until_all_served']:.0f} s |",
            f"| served, at rest ({served['seconds']:.0f} s): operator CPU | {100 * served['cpu_share_of_a_core']:.1f} % of a core |",
            f"| served: Prometheus queries per autoscaler cycle | {served['prometheus_queries_per_cycle']} |",
            f"| served: API writes per cycle | {served['writes_per_cycle']} ({', '.join(f'{k} {v}' for k, v in served['writes'].items()) or 'none'}) |",
            f"| served: autoscaler cycle (all {args.services + 1} services) | {served['cycle_seconds_mean']} s on average |",
            "| served: decision latency (load step to replica patch, 5 s cycle) | "
            + (
                f"{latency['seconds_from_load_step_to_replica_patch']} s"
                if "error" not in latency
                else latency["error"]
            )
            + " |",
        ]
    if profile:
        table += [f"| memory profile (restarted operator) | {profile[0]} |"]
    (out / "table.md").write_text("\n".join(table) + "\n")
    plot(timeline, args.services, out / "convergence.png")
    print("\n".join(table))
    print(f"\nwritten: {out}/results.json, table.md, convergence.png; operator log {operator.log}")
    if profile:
        print("memory profile:\n    " + "\n    ".join(profile))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
