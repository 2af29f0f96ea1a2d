"""Scale benchmark (`make scale-bench`): N LlamaServices on the local cluster, one operator process.

Prints, and writes to --out (results.json, table.md, convergence.png):
- the time to create the N objects and the time until every one has converged (its Service and Deployment
  exist and its status records the current generation);
- the operator's peak RSS (VmHWM) and its memory after convergence;
- API writes per LlamaService, from the API server's own request counters (apiserver_request_total),
  split by resource and verb: creates, applies and status patches, and DELETEs;
- a second pass over the same N services with nothing changed (a resync) to show it writes nothing;
- the time to delete them all and for the garbage collector to remove what they owned.

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
from pathlib import Path
from typing import Any

from kubernetes import client, config

from fleet import FleetProcess
from llama_operator.fleetsim.load import LoadSpec
from localcluster import info as cluster_info
from support import Cluster, OperatorProcess

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


def decision_latency(api: client.ApiClient, info: Any, namespace: str, out: Path) -> dict[str, Any]:
    """One more autoscaled LlamaService, its pod served by the fleet simulator: the seconds from a load
    step to the replica patch, while the loop also decides for the N idle ones."""
    fleet = FleetProcess(info, log_dir=out)
    fleet.start()
    custom, apps = client.CustomObjectsApi(api), client.AppsV1Api(api)
    try:
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

        deadline = time.monotonic() + 180
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
    finally:
        fleet.stop()


def at_rest(
    api: client.ApiClient, pid: int, prometheus_url: str, seconds: float, interval: float
) -> dict[str, Any]:
    """The operator with N autoscaled services and no load: CPU share, queries and writes per cycle."""
    writes_before, queries_before, cpu_before = (
        request_counts(api),
        prometheus_queries(prometheus_url),
        cpu_seconds(pid),
    )
    start = time.monotonic()
    time.sleep(seconds)
    elapsed = time.monotonic() - start
    cycles = elapsed / interval
    writes = operator_writes(writes_before, request_counts(api))
    return {
        "seconds": round(elapsed, 1),
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
        action="store_true",
        help="trace the operator's allocations (tracemalloc; slows it): memory-<pid>.txt in --out",
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
            **(
                {"LLAMA_OPERATOR_TRACEMALLOC_FILE": str(out.resolve() / "memory-{pid}.txt")}
                if args.profile_memory
                else {}
            ),
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
        print(
            f"==> {args.services} autoscaled services at rest (no metrics) for {args.rest_seconds:.0f}s",
            flush=True,
        )
        rest = at_rest(api, pid, loaded.prometheus_url, args.rest_seconds, interval)
        print(f"    {json.dumps(rest)}", flush=True)
        print(
            "==> decision latency: a load step on one more service, the fleet simulator serving it",
            flush=True,
        )
        rest["decision_latency"] = decision_latency(api, loaded, namespace, out)
        print(f"    {json.dumps(rest['decision_latency'])}", flush=True)
        rss_peak = max(rss_peak, rss_kib(pid, "VmHWM"))
    print("==> a resync with nothing changed (operator restarted: every key is reconciled again)", flush=True)
    before_resync = request_counts(api)
    operator.restart()
    time.sleep(max(30.0, args.services * 0.05))
    resync_writes = operator_writes(before_resync, request_counts(api))
    print(f"    writes: {json.dumps(resync_writes)}", flush=True)

    print("==> deleting them all", flush=True)
    start_delete = time.monotonic()
    cluster.kubectl("delete", "namespace", namespace, "--wait=false")
    core = client.CoreV1Api(api)
    while any(ns.metadata.name == namespace for ns in core.list_namespace().items):
        time.sleep(2)
    deleted = time.monotonic() - start_delete
    operator.stop()

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
            f"| at rest ({rest['seconds']:.0f} s, no metrics): operator CPU | {100 * rest['cpu_share_of_a_core']:.1f} % of a core |",
            f"| at rest: Prometheus queries per autoscaler cycle | {rest['prometheus_queries_per_cycle']} |",
            f"| at rest: API writes per cycle | {rest['writes_per_cycle']} |",
            f"| decision latency (load step to replica patch, 5 s cycle) | {rest['decision_latency']} |",
        ]
    (out / "table.md").write_text("\n".join(table) + "\n")
    plot(timeline, args.services, out / "convergence.png")
    print("\n".join(table))
    print(f"\nwritten: {out}/results.json, table.md, convergence.png; operator log {operator.log}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
