"""Read `.cluster/cluster.json` from tests: `load()` or `None` when no cluster is up."""

from __future__ import annotations

import json
import os
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from localcluster.config import state_dir


@dataclass(frozen=True)
class ClusterInfo:
    raw: dict[str, Any]

    @property
    def kubeconfig(self) -> Path:
        return Path(self.raw["kubeconfig"])

    @property
    def kubectl_path(self) -> Path:
        return Path(self.raw["kubectl"])

    @property
    def helm_path(self) -> Path:
        return Path(self.raw["helm"])

    @property
    def bin_dir(self) -> Path:
        return Path(self.raw["bin_dir"])

    @property
    def prometheus_url(self) -> str:
        return str(self.raw["prometheus_url"])

    @property
    def prometheus_targets_dir(self) -> Path:
        return Path(self.raw["prometheus_targets_dir"])

    @property
    def fleet_port(self) -> int:
        return int(self.raw["fleet_port"])

    @property
    def apiserver_url(self) -> str:
        return str(self.raw["apiserver_url"])

    @property
    def nodes(self) -> list[str]:
        return [str(n) for n in self.raw["nodes"]]

    def env(self) -> dict[str, str]:
        """os.environ plus KUBECONFIG, PROMETHEUS_URL and the tools on PATH."""
        env = dict(os.environ)
        env["KUBECONFIG"] = str(self.kubeconfig)
        env["PROMETHEUS_URL"] = self.prometheus_url
        env["LOCALCLUSTER_FLEET_PORT"] = str(self.fleet_port)
        env["PATH"] = f"{self.bin_dir}{os.pathsep}{env.get('PATH', '')}"
        return env

    def kubectl(
        self, *args: str, input_text: str | None = None, check: bool = True, timeout: float = 60.0
    ) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(self.kubectl_path), f"--kubeconfig={self.kubeconfig}", *args],
            input=input_text,
            capture_output=True,
            text=True,
            check=check,
            timeout=timeout,
        )

    def wait_crd_established(self, name: str, timeout: float = 60.0) -> str | None:
        """Wait until the CRD `name` is Established; None then, else kubectl's last complaint. Retried: right
        after its apply, on a cluster started seconds before, a CRD can have no conditions yet, which
        `kubectl wait` takes as an error at once ("accessor error: <nil>") instead of waiting."""
        deadline = time.monotonic() + timeout
        while True:
            done = self.kubectl(
                "wait", "--for=condition=Established", f"crd/{name}", "--timeout=10s", check=False
            )
            if done.returncode == 0:
                return None
            if time.monotonic() > deadline:
                return done.stderr.strip() or f"kubectl wait exited {done.returncode}"
            time.sleep(1)

    def service_account_kubeconfig(
        self,
        account: str,
        namespace: str,
        path: Path,
        duration: str = "2h",
        *,
        context_namespace: bool = True,
    ) -> Path:
        """A kubeconfig holding a ServiceAccount's token (JSON, which kubeconfig readers accept): runs a
        process with exactly that account's RBAC, as it would have in a pod. Its context names the
        account's namespace, as a pod's mounted namespace file does (unless context_namespace is False)."""
        token = self.kubectl(
            "create", "token", account, "-n", namespace, f"--duration={duration}"
        ).stdout.strip()
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "current-context": account,
            "clusters": [
                {
                    "name": "local",
                    "cluster": {
                        "server": self.apiserver_url,
                        "certificate-authority": self.raw["pki"]["ca_cert"],
                    },
                }
            ],
            "users": [{"name": account, "user": {"token": token}}],
            "contexts": [
                {
                    "name": account,
                    "context": {
                        "cluster": "local",
                        "user": account,
                        **({"namespace": namespace} if context_namespace else {}),
                    },
                }
            ],
        }
        path.write_text(json.dumps(config, indent=2))
        return path

    def kubectl_json(self, *args: str) -> Any:
        return json.loads(self.kubectl(*args, "-o", "json").stdout)


def cluster_json_path() -> Path:
    env = os.environ.get("LOCALCLUSTER_CLUSTER_JSON")
    return Path(env) if env else state_dir() / "cluster.json"


def load(path: Path | None = None) -> ClusterInfo | None:
    path = path or cluster_json_path()
    if not path.exists():
        return None
    return ClusterInfo(json.loads(path.read_text()))
