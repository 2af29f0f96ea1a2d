"""The local cluster's process bookkeeping, against the real etcd binary it runs."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from localcluster.config import ETCD_VERSION, cache_paths
from localcluster.procs import Component, Processes, is_ours
from localcluster.util import TLSClient, free_port

pytestmark = pytest.mark.beside_operators


def test_a_process_is_ours_from_the_moment_it_is_started(tmp_path: Path) -> None:
    # Just after exec the kernel shows an empty /proc/PID/cmdline for a moment; taking that for "exited"
    # failed `cluster.sh up` at random ("etcd health: process exited" while etcd ran).
    etcd = cache_paths().binary("etcd", ETCD_VERSION)
    if not etcd.exists():
        pytest.skip(f"{etcd} not built (e2e/cluster.sh up builds it)")
    for attempt in range(25):
        proc = subprocess.Popen(
            [str(etcd), "--version"],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
            cwd=tmp_path,
        )
        try:
            # is_ours first: `etcd --version` exits at once, and a process that exits after poll() and before
            # is_ours() is a zombie there (not ours), which read as a failure on a busy host. Polled after,
            # an exit shows, while an exec taken for an exit still fails.
            ours = is_ours(proc.pid, str(etcd))
            assert ours or proc.poll() is not None, f"attempt {attempt}"
        finally:
            proc.wait(timeout=30)
    assert not is_ours(proc.pid, str(etcd))  # reaped: gone


SLOW_EXIT = """
import http.server, signal, sys, threading, time
server = http.server.HTTPServer(("127.0.0.1", int(sys.argv[1])), http.server.SimpleHTTPRequestHandler)
def stop(*_):
    threading.Thread(target=server.shutdown).start()  # unhealthy at once ...
    time.sleep(5)                                      # ... but gone only after a while
    sys.exit(0)
signal.signal(signal.SIGTERM, stop)
server.serve_forever()
time.sleep(60)
"""


def test_up_waits_for_a_component_that_is_still_shutting_down(tmp_path: Path) -> None:
    """`cluster.sh up` right after a component was stopped: it waits for the old process to exit, then
    starts it again, instead of failing with "process exited" (its own sandbox, not the shared cluster)."""
    script = tmp_path / "slow_exit.py"
    script.write_text(SLOW_EXIT)
    port = free_port()
    comp = Component(
        name="slow",
        argv=[sys.executable, str(script), str(port)],
        port=port,
        health_url=f"http://127.0.0.1:{port}/",
    )
    procs = Processes(tmp_path, TLSClient(verify=False))
    procs.start(comp)
    deadline = time.monotonic() + 20
    while not procs.healthy(comp) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert procs.healthy(comp)
    assert comp.pid is not None
    os.kill(comp.pid, signal.SIGTERM)  # as `cluster.sh down` of that one component would
    time.sleep(0.3)
    started = time.monotonic()
    assert procs.alive(comp)  # still shutting down
    assert procs.settle(comp, timeout=15) == "exited"
    assert time.monotonic() - started >= 3.0  # it waited for the exit
    procs.start(comp)  # and a fresh start works
    deadline = time.monotonic() + 20
    while not procs.healthy(comp) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert procs.healthy(comp)
    procs.stop_all([comp], timeout=10)
