"""The local cluster's process bookkeeping, against real processes."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from localcluster.procs import Component, Processes, is_ours
from localcluster.util import (
    ClusterError,
    TLSClient,
    one_off_port,
    port_ledger,
    release_ports,
    reserve_port,
)

pytestmark = pytest.mark.beside_operators


def test_a_process_is_ours_from_the_moment_it_is_started(tmp_path: Path) -> None:
    # Just after exec the kernel shows an empty /proc/PID/cmdline for a moment; taking that for "exited"
    # failed `cluster.sh up` at random ("etcd health: process exited" while etcd ran). A binary that stays
    # up (a real one, not etcd: `etcd --version` exits at once, and a process caught exiting has neither
    # cmdline nor exe yet is not reaped, so the check could not tell a misread from an exit).
    sleep = shutil.which("sleep")
    assert sleep is not None
    for attempt in range(25):
        proc = subprocess.Popen(
            [sleep, "60"],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
            cwd=tmp_path,
        )
        try:
            assert is_ours(proc.pid, sleep), f"attempt {attempt}"
        finally:
            proc.kill()
            proc.wait(timeout=30)
    assert not is_ours(proc.pid, sleep)  # reaped: gone


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
    port = reserve_port(tmp_path)
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
    release_ports(tmp_path)


def _bindable(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def _two_free_ports() -> tuple[int, int]:
    """Two neighbouring ports below the ephemeral range that nothing binds now."""
    for low in range(24000, 30000, 2):
        if _bindable(low) and _bindable(low + 1):
            return low, low + 1
    pytest.fail("no two neighbouring free ports")


def test_a_reserved_port_is_held_for_its_folder_until_released(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A cluster's fleet port is reserved at `up` and bound only when a fleet simulator starts; another
    # cluster started meanwhile must not be handed it (CI: the demo's fleet simulator refused with "Address
    # already in use", its load sent to another process on that port). Nothing here binds the ports.
    monkeypatch.setenv("LLAMA_OPERATOR_CACHE", str(tmp_path / "cache"))
    first, second, third = (tmp_path / name for name in ("first", "second", "third"))
    for folder in (first, second, third):
        folder.mkdir()
    span = _two_free_ports()
    a = reserve_port(first, span=span)
    b = reserve_port(second, span=span)
    assert {a, b} == set(span)
    assert (port_ledger() / str(a)).read_text().strip() == str(first.resolve())
    with pytest.raises(ClusterError, match="no free port"):
        reserve_port(third, span=span)
    # The same folder may take its own port again (a cluster brought up again in place).
    assert reserve_port(first, span=(a, a)) == a
    # Released, the port goes to the next folder; a folder that is gone holds nothing.
    assert release_ports(second) == 1
    assert reserve_port(third, span=span) == b
    shutil.rmtree(first)
    assert reserve_port(second, span=span) == a
    assert (port_ledger() / str(b)).read_text().strip() == str(third.resolve())


def test_a_one_off_port_is_below_the_ephemeral_range_and_held_while_its_process_lives() -> None:
    """No outgoing connection can take a one-off port between its choice and its bind (they take their source
    ports from the ephemeral range), and no cluster can reserve it while the process that chose it lives."""
    low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    port = one_off_port()
    assert port < low
    assert (port_ledger() / str(port)).read_text().strip() == f"/proc/{os.getpid()}"
    assert port not in {one_off_port() for _ in range(20)}
