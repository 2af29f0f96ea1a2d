"""A real OCI registry on 127.0.0.1: CNCF distribution's `registry`, built from the Go module proxy."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from localcluster.binaries import ensure_registry
from localcluster.config import REGISTRY_MODULE, REGISTRY_VERSION, REPO_ROOT, cache_paths
from localcluster.util import ClusterError, one_off_port, say, wait_until_serving

STATE = REPO_ROOT / "dist" / "registry"


@dataclass(frozen=True)
class Registry:
    host: str  # 127.0.0.1:PORT, what image and chart references start with
    pid: int
    root: Path


def _config(root: Path, port: int) -> str:
    return (
        "version: 0.1\n"
        "log: {level: warn, accesslog: {disabled: true}}\n"
        f"storage: {{filesystem: {{rootdirectory: {root / 'data'}}}, delete: {{enabled: true}}}}\n"
        f"http: {{addr: 127.0.0.1:{port}}}\n"
    )


def answers(host: str) -> bool:
    try:
        with urllib.request.urlopen(f"http://{host}/v2/", timeout=2) as reply:
            return bool(reply.status == 200)
    except (urllib.error.URLError, OSError):
        return False


def start(root: Path) -> Registry:
    """Start a registry storing under `root` (plain HTTP, 127.0.0.1 only); returns once /v2/ answers."""
    binary = ensure_registry(cache_paths())
    root.mkdir(parents=True, exist_ok=True)
    port = one_off_port()
    config = root / "config.yml"
    config.write_text(_config(root, port))
    log = (root / "registry.log").open("ab")
    proc = subprocess.Popen(
        [str(binary), "serve", str(config)],
        stdout=log,
        stderr=log,
        stdin=subprocess.DEVNULL,
        start_new_session=True,
    )
    host = f"127.0.0.1:{port}"
    try:
        wait_until_serving(f"the registry on {host}", proc, lambda: answers(host), root / "registry.log")
    except ClusterError:
        proc.kill()
        raise
    (root / "pid").write_text(f"{proc.pid}\n")
    (root / "host").write_text(f"{host}\n")
    say(
        f"registry: {REGISTRY_MODULE} {REGISTRY_VERSION} on http://{host} (pid {proc.pid}, data {root / 'data'})"
    )
    return Registry(host=host, pid=proc.pid, root=root)


def stop(registry: Registry) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(registry.pid, signal.SIGTERM)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            os.kill(registry.pid, 0)
        except ProcessLookupError:
            break
        time.sleep(0.1)
    else:
        with contextlib.suppress(ProcessLookupError):
            os.kill(registry.pid, signal.SIGKILL)
    for name in ("pid", "host"):
        (registry.root / name).unlink(missing_ok=True)


def running(root: Path = STATE) -> Registry | None:
    try:
        pid = int((root / "pid").read_text())
        host = (root / "host").read_text().strip()
    except (OSError, ValueError):
        return None
    return Registry(host=host, pid=pid, root=root) if answers(host) else None


def up(root: Path = STATE) -> Registry:
    """The project's local registry (dist/registry): reused when it answers."""
    return running(root) or start(root)


def down(root: Path = STATE) -> None:
    registry = running(root)
    if registry is not None:
        stop(registry)
        say(f"registry: stopped (pid {registry.pid})")


@contextlib.contextmanager
def serving(root: Path) -> Iterator[Registry]:
    """A registry of one's own for the duration (tests)."""
    registry = start(root)
    try:
        yield registry
    finally:
        stop(registry)
