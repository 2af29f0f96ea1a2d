"""The local cluster's process bookkeeping, against the real etcd binary it runs."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from localcluster.config import ETCD_VERSION, cache_paths
from localcluster.procs import is_ours


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
            assert proc.poll() is not None or is_ours(proc.pid, str(etcd)), f"attempt {attempt}"
        finally:
            proc.wait(timeout=30)
    assert not is_ours(proc.pid, str(etcd))  # reaped: gone
