"""Helpers of the closed-loop tests: the fleet simulator as a process, Prometheus stopped and brought
back, and fast reads of what the autoscaler did (the Python client: a poll loop of kubectl processes
would cost the 2-core machine more CPU than the control plane)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client, config

from llama_bench.fleetsim.client import FleetClient
from localcluster.info import ClusterInfo
from localcluster.util import log_tail
from support import GROUP, Cluster, OperatorProcess, eventually, repo_root, wait_healthz

VERSION, PLURAL = "v1alpha1", "llamaservices"


@contextmanager
def running_fleet(info: ClusterInfo, log_dir: Path, *args: str) -> Iterator[FleetProcess]:
    """`llama-bench fleet-sim ARGS` for the block; it must stop cleanly on SIGTERM."""
    proc = FleetProcess(info, log_dir, list(args))
    proc.start()
    yield proc
    code = proc.stop()
    assert code == 0, f"fleet-sim did not stop cleanly on SIGTERM ({code}):\n{proc.tail()}"


@contextmanager
def closed_loop_operator(
    cluster: Cluster, log_dir: Path, *, interval: float, window: float, cold_start: str, **env: str
) -> Iterator[OperatorProcess]:
    """The operator for a closed loop with the fleet simulator: it decides every `interval` seconds over a
    `window`-second signal window, and kwok makes each pod Ready `cold_start` after it runs."""
    proc = OperatorProcess(
        cluster,
        log_dir=log_dir,
        extra_env={
            "LLAMA_OPERATOR_AUTOSCALE_INTERVAL_SECONDS": f"{interval:g}",
            "LLAMA_OPERATOR_SIGNAL_WINDOW_SECONDS": f"{window:g}",
            "LLAMA_OPERATOR_POD_ANNOTATIONS": f'{{"pod-ready.stage.kwok.x-k8s.io/delay": "{cold_start}"}}',
            **env,
        },
    )
    proc.start()
    yield proc
    proc.stop()


@dataclass
class FleetProcess:
    """`llama-bench fleet-sim` on the cluster's reserved fleet port."""

    info: ClusterInfo
    log_dir: Path
    extra_args: list[str] = field(default_factory=list)  # e.g. --load-file
    proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.info.fleet_port}"

    @property
    def log(self) -> Path:
        return self.log_dir / "fleet-sim.log"

    @property
    def client(self) -> FleetClient:
        return FleetClient(self.url)

    def start(self) -> None:
        cmd = [
            sys.executable,
            "-m",
            "llama_bench",
            "fleet-sim",
            f"--port={self.info.fleet_port}",
            f"--kubeconfig={self.info.kubeconfig}",
            *self.extra_args,
        ]
        with self.log.open("wb") as out:
            self.proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, cwd=repo_root())
        wait_healthz("fleet-sim", self.proc, f"{self.url}/healthz", self.log)

    def stop(self) -> int | None:
        """SIGTERM; the exit code (None if it had to be killed)."""
        if self.proc is None:
            return None
        if self.proc.poll() is not None:
            return self.proc.returncode
        self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=10)
            return None

    def tail(self, lines: int = 40) -> str:
        return log_tail(self.log, lines)

    def service(self, namespace: str, name: str) -> dict[str, Any]:
        return self.client.service(namespace, name)


@dataclass
class Prometheus:
    """The cluster's Prometheus: queries, and a stop/start cycle for the no-data test."""

    info: ClusterInfo

    @property
    def url(self) -> str:
        return self.info.prometheus_url

    @property
    def scrape_interval(self) -> float:
        return float(self.info.raw.get("scrape_interval_s", 5.0))

    @property
    def pid_file(self) -> Path:
        return Path(self.info.raw["components"]["prometheus"]["pid_file"])

    def query(self, promql: str) -> list[dict[str, Any]]:
        url = f"{self.url}/api/v1/query?{urllib.parse.urlencode({'query': promql})}"
        with urllib.request.urlopen(url, timeout=5) as r:
            body = json.loads(r.read())
        result: list[dict[str, Any]] = body["data"]["result"]
        return result

    def value(self, promql: str) -> float | None:
        """The single value of an instant query, None when empty (or Prometheus is down)."""
        try:
            result = self.query(promql)
        except (OSError, urllib.error.URLError):
            return None
        return float(result[0]["value"][1]) if result else None

    def ready(self) -> bool:
        try:
            with urllib.request.urlopen(f"{self.url}/-/ready", timeout=2) as r:
                return bool(r.status == 200)
        except OSError:
            return False

    def pid(self) -> int | None:
        try:
            pid = int(self.pid_file.read_text().strip())
            os.kill(pid, 0)
        except (OSError, ValueError):
            return None
        return pid

    def stop(self) -> None:
        """SIGTERM to the PID in the cluster's pid file; returns once the process is gone."""
        pid = self.pid()
        if pid is None:
            pytest.fail(f"no running Prometheus behind {self.pid_file}")
        os.kill(pid, signal.SIGTERM)

        def gone() -> bool:
            try:
                os.kill(pid, 0)
            except OSError:
                return True
            return False

        eventually(f"Prometheus (pid {pid}) to exit", gone, timeout=30, interval=0.2)

    def start(self) -> float:
        """`e2e/cluster.sh up` restarts what is missing (here: Prometheus); seconds it took."""
        started = time.monotonic()
        done = subprocess.run(
            ["bash", str(repo_root() / "e2e" / "cluster.sh"), "up"],
            capture_output=True,
            text=True,
            timeout=180,
            check=False,
        )
        if done.returncode != 0:
            pytest.fail(f"cluster.sh up failed ({done.returncode}):\n{done.stdout}\n{done.stderr}")
        eventually("Prometheus ready", self.ready, timeout=60)
        return time.monotonic() - started


@dataclass
class Kube:
    """Reads of one LlamaService, its Deployment and its Events through the Python client."""

    info: ClusterInfo
    _api: client.ApiClient | None = field(default=None, repr=False)

    def api(self) -> client.ApiClient:
        if self._api is None:
            self._api = config.new_client_from_config(config_file=str(self.info.kubeconfig))
        return self._api

    def _json(self, response: Any) -> dict[str, Any]:
        data: dict[str, Any] = json.loads(response.data)
        return data

    def deployment(self, namespace: str, name: str) -> dict[str, Any]:
        try:
            return self._json(
                client.AppsV1Api(self.api()).read_namespaced_deployment(
                    name, namespace, _preload_content=False
                )
            )
        except client.ApiException as err:
            if err.status == 404:
                return {}
            raise

    def replicas(self, namespace: str, name: str) -> tuple[int | None, int]:
        """(spec.replicas, status.readyReplicas) of the Deployment."""
        d = self.deployment(namespace, name)
        spec = (d.get("spec") or {}).get("replicas")
        return spec, int((d.get("status") or {}).get("readyReplicas") or 0)

    def llamaservice(self, namespace: str, name: str) -> dict[str, Any]:
        return self._json(
            client.CustomObjectsApi(self.api()).get_namespaced_custom_object(
                GROUP, VERSION, namespace, PLURAL, name, _preload_content=False
            )
        )

    def condition(self, namespace: str, name: str, type_: str) -> dict[str, Any]:
        status = self.llamaservice(namespace, name).get("status") or {}
        return next((c for c in status.get("conditions") or [] if c["type"] == type_), {})

    def autoscaling(self, namespace: str, name: str) -> dict[str, Any]:
        status = self.llamaservice(namespace, name).get("status") or {}
        result: dict[str, Any] = status.get("autoscaling") or {}
        return result

    def events(self, namespace: str, name: str) -> list[dict[str, Any]]:
        response = client.CoreV1Api(self.api()).list_namespaced_event(
            namespace,
            field_selector=f"involvedObject.name={name},involvedObject.kind=LlamaService",
            _preload_content=False,
        )
        items: list[dict[str, Any]] = self._json(response)["items"]
        return items

    def event_reasons(self, namespace: str, name: str) -> list[str]:
        return [str(e.get("reason")) for e in self.events(namespace, name)]

    def close(self) -> None:
        if self._api is not None:
            self._api.close()
