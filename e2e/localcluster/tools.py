"""Every upstream tool a test runs, in one list: what the set-up step (`cluster.sh test-tools`, which `make
test` runs before any test starts) builds or installs, and the only names a test may look up.

A test looks a tool up with `require(name)` and never builds it: cold, a build takes minutes (Kubernetes
10-25, the endpoint picker about 2) and ran out the timeout of the test that started it, on a fresh machine
only (the tests' conftests set NO_BUILDS_ENV, so any build a test still reaches fails at once, naming the
set-up step). A tool a test needs goes here first; tests/test_tools_for_tests.py checks that every name a
test looks up is listed, that no test calls a build, and that the set-up step, from an empty cache, plans to
build every cached one.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from imagebuild import image
from localcluster.binaries import (
    KUBE_COMMANDS,
    ensure_actionlint,
    ensure_endpoint_picker,
    ensure_etcd,
    ensure_karpenter_kwok,
    ensure_kubectl_helm,
    ensure_kubernetes,
    ensure_kwok,
    ensure_lws_controller,
    ensure_prometheus,
    ensure_promtool,
    ensure_registry,
)
from localcluster.config import (
    ACTIONLINT_VERSION,
    ETCD_VERSION,
    INFERENCE_EXTENSION_VERSION,
    KARPENTER_VERSION,
    KUBERNETES_VERSION,
    KWOK_VERSION,
    LWS_VERSION,
    PROMETHEUS_VERSION,
    REGISTRY_VERSION,
    cache_paths,
)
from localcluster.util import SETUP_COMMAND, ClusterError, apt_install, fmt_duration, say


@dataclass(frozen=True)
class Tool:
    name: str  # what a test passes to require()
    path: Callable[
        [], Path
    ]  # where it is once built (in the cache LLAMA_OPERATOR_CACHE names, or the system's)
    build: Callable[[], object]  # builds or installs it, under the cache's lock; a no-op once built
    cached: bool = True  # False: a system (Debian) package, outside the cache
    built: Callable[[], bool] | None = None  # when being built is more than its path existing

    def is_built(self) -> bool:
        return self.built() if self.built is not None else self.path().exists()


def _binary(name: str, version: str) -> Callable[[], Path]:
    return lambda: cache_paths().binary(name, version)


def _debian(package: str) -> Tool:
    probe = Path("/usr/bin") / package
    return Tool(package, lambda: probe, lambda: apt_install(package, probe), cached=False)


def _base_built() -> bool:
    rootfs = image.base_rootfs()
    return rootfs.exists() and rootfs.with_suffix(".dpkg.json").exists()


# In build order: the local cluster's own binaries first, cheapest first as `cluster.sh up` builds them (a
# broken registry shows before the long Kubernetes build), then what single tests run.
TOOLS: tuple[Tool, ...] = (
    Tool("prometheus", _binary("prometheus", PROMETHEUS_VERSION), lambda: ensure_prometheus(cache_paths())),
    Tool("promtool", _binary("promtool", PROMETHEUS_VERSION), lambda: ensure_promtool(cache_paths())),
    Tool("kubectl", lambda: cache_paths().tools / "kubectl", lambda: ensure_kubectl_helm(cache_paths())),
    Tool("helm", lambda: cache_paths().tools / "helm", lambda: ensure_kubectl_helm(cache_paths())),
    Tool("kwok", _binary("kwok", KWOK_VERSION), lambda: ensure_kwok(cache_paths())),
    Tool("etcd", _binary("etcd", ETCD_VERSION), lambda: ensure_etcd(cache_paths())),
    *(
        Tool(command, _binary(command, KUBERNETES_VERSION), lambda: ensure_kubernetes(cache_paths()))
        for command in KUBE_COMMANDS
    ),
    _debian("openssl"),  # the cluster's certificates
    # The inference extension's endpoint picker (e2e/test_router_inference_pool.py).
    Tool(
        "lwepp", _binary("lwepp", INFERENCE_EXTENSION_VERSION), lambda: ensure_endpoint_picker(cache_paths())
    ),
    # LeaderWorkerSet's controller (e2e/test_multi_node_lws.py).
    Tool(
        "lws-controller", _binary("lws-controller", LWS_VERSION), lambda: ensure_lws_controller(cache_paths())
    ),
    # Karpenter with its kwok cloud provider: a real node provisioner for the local cluster.
    Tool(
        "karpenter-kwok",
        _binary("karpenter-kwok", KARPENTER_VERSION),
        lambda: ensure_karpenter_kwok(cache_paths()),
    ),
    # The release (e2e/test_release.py): `make release` builds the image with buildah on a Debian base made by
    # mmdebstrap, installs the locked wheels, pushes to a registry; install.md's mirror step copies with skopeo.
    Tool("registry", _binary("registry", REGISTRY_VERSION), lambda: ensure_registry(cache_paths())),
    _debian("skopeo"),
    _debian("buildah"),
    _debian("mmdebstrap"),
    Tool("image-base", image.base_rootfs, image.ensure_base, built=_base_built),
    Tool(
        "image-wheelhouse",
        image.wheelhouse_dir,
        image.wheelhouse,
        built=lambda: not image.wheelhouse_missing(image.wheelhouse_dir()),
    ),
    # The release workflow's linter (e2e/test_release_workflow.py) and the shell checker it runs on the
    # workflows' scripts.
    Tool("actionlint", _binary("actionlint", ACTIONLINT_VERSION), lambda: ensure_actionlint(cache_paths())),
    _debian("shellcheck"),
    # docs/install.md's Argo CD health check, run by tests/docs/test_argocd_health.py.
    _debian("lua5.4"),
)
TOOL_NAMES = tuple(tool.name for tool in TOOLS)
_BY_NAME = {tool.name: tool for tool in TOOLS}


def require(name: str) -> Path:
    """The built tool's path, looked up and never built: a ClusterError naming the set-up step when it is
    missing, a KeyError when `name` is not in TOOLS."""
    tool = _BY_NAME[name]
    if not tool.is_built():
        raise ClusterError(f"{name} is not built (no {tool.path()}): run `{SETUP_COMMAND}` before the tests")
    return tool.path()


def set_up(*, dry_run: bool = False) -> list[str]:
    """Build or install every tool that is missing, with a line before and after each; with `dry_run`, only
    say which. Returns the names of those it built (or would build). Warm, it only looks: under a second."""
    t0 = time.monotonic()
    missing = [tool for tool in TOOLS if not tool.is_built()]
    say(f"tools for tests: {len(TOOLS) - len(missing)} of {len(TOOLS)} built, cache {cache_paths().root}")
    for index, tool in enumerate(missing, 1):
        step = f"tools for tests [{index}/{len(missing)}] {tool.name}"
        verb = "build" if tool.cached else "install (apt)"
        if dry_run:
            say(f"{step}: would {verb} {tool.path()}")
            continue
        if tool.is_built():  # built beside another (kubectl with helm, the three Kubernetes commands)
            continue
        started = time.monotonic()
        say(f"{step}: {verb} {tool.path()}")
        tool.build()
        say(f"{step}: done in {fmt_duration(time.monotonic() - started)}")
    if not dry_run:
        say(f"tools for tests: all {len(TOOLS)} built ({fmt_duration(time.monotonic() - t0)})")
    return [tool.name for tool in missing]
