"""`make demo`, as a newcomer runs it: the chart installed, the operator out of the cluster with the chart's
ServiceAccount, every example Ready, and the autoscaled one following the load. The script exits non-zero
when any of that does not happen, so this test fails whenever the README's first command stops working."""

from __future__ import annotations

import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from support import Cluster, repo_root

pytestmark = pytest.mark.e2e

DEMO_RELEASE, DEMO_RELEASE_NS, DEMO_NS = "llama-operator", "llama-operator-system", "demo"


@pytest.fixture
def demo_down(cluster: Cluster) -> Iterator[None]:
    yield
    subprocess.run([sys.executable, "e2e/demo.py", "down"], cwd=repo_root(), check=False, timeout=120)
    cluster.kubectl("delete", "namespace", DEMO_NS, "--wait=false", check=False)
    cluster.helm("uninstall", DEMO_RELEASE, "-n", DEMO_RELEASE_NS)


def demo_up(load_seconds: int, wait_seconds: int, timeout: float) -> tuple[int, str]:
    """`e2e/demo.py up` (what `make demo` runs): its exit code and its output."""
    done = subprocess.run(
        [
            sys.executable,
            "e2e/demo.py",
            "up",
            "--load-seconds",
            str(load_seconds),
            "--wait-seconds",
            str(wait_seconds),
        ],
        cwd=repo_root(),
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    return done.returncode, done.stdout + done.stderr


def test_a_fleet_simulator_that_cannot_bind_stops_the_demo(cluster: Cluster, demo_down: None) -> None:
    # CI once ran the demo while another process held the fleet port: the simulator exited at once, and the
    # load went to that process ("HTTP Error 400"), the demo reporting only that replicas never changed.
    with socket.socket() as holder:
        # A fleet simulator an earlier test ran on this cluster leaves connections in TIME_WAIT on the port;
        # without SO_REUSEADDR they refuse this bind for a minute (a listener still holding it does not).
        holder.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        holder.bind(("127.0.0.1", cluster.info.fleet_port))
        holder.listen()
        code, output = demo_up(0, 30, timeout=300)
    assert code != 0, output[-3000:]
    assert f"the fleet simulator did not come up on port {cluster.info.fleet_port}" in output, output[-3000:]
    assert "Address already in use" in output, output[-3000:]
    assert "applied examples/" not in output, output[-3000:]


def test_make_demo_places_every_example_and_follows_the_load(cluster: Cluster, demo_down: None) -> None:
    code, output = demo_up(75, 150, timeout=600)
    assert code == 0, output[-6000:]
    assert "every example is Ready and chat-slo followed the load" in output, output[-6000:]
    # The closing hint points at the cluster's env file, wherever the cluster keeps its state.
    hint = next(line.split()[1] for line in output.splitlines() if line.strip().startswith(". /"))
    assert Path(hint).is_file(), hint
