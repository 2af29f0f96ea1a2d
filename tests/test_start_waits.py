"""The e2e tests' and the demo's waits for a process to serve (localcluster.util.wait_until_serving) scale
with the process: they last while it is alive and making progress (CPU time or log output), so a start slowed
by a busy host still passes (the fleet simulator missed a fixed 30 s wait while importing), and they fail at
once, with the log's tail, when it exits or stalls."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "e2e"))

from localcluster.util import ClusterError, wait_until_serving


def started(script: str, log: Path) -> subprocess.Popen[bytes]:
    with log.open("wb") as out:
        return subprocess.Popen([sys.executable, "-c", script], stdout=out, stderr=subprocess.STDOUT)


def test_a_start_that_keeps_working_is_waited_for_past_the_stall_bound(tmp_path: Path) -> None:
    """Busy for 2.5 s (CPU only, no output) before it serves: longer than the 1 s stall bound, never
    stalled."""
    ready = tmp_path / "ready"
    script = f"import time, pathlib\nt = time.monotonic()\nwhile time.monotonic() - t < 2.5: pass\npathlib.Path({str(ready)!r}).touch()\ntime.sleep(30)"
    proc = started(script, tmp_path / "log")
    try:
        took = wait_until_serving("busy", proc, ready.exists, tmp_path / "log", stalled_after=1.0, at_most=20)
    finally:
        proc.kill()
    assert took > 2.0


def test_a_process_that_exits_fails_at_once_with_its_log(tmp_path: Path) -> None:
    proc = started("print('cannot bind: address in use'); raise SystemExit(3)", tmp_path / "log")
    t0 = time.monotonic()
    with pytest.raises(ClusterError, match=r"(?s)exited with 3.*cannot bind: address in use"):
        wait_until_serving("dying", proc, lambda: False, tmp_path / "log", stalled_after=30, at_most=60)
    assert time.monotonic() - t0 < 10


def test_a_stalled_process_fails_after_the_stall_bound(tmp_path: Path) -> None:
    proc = started("import time; print('waiting on nothing', flush=True); time.sleep(60)", tmp_path / "log")
    try:
        with pytest.raises(
            ClusterError, match=r"(?s)used no CPU and wrote nothing for 1 s.*waiting on nothing"
        ):
            wait_until_serving("stuck", proc, lambda: False, tmp_path / "log", stalled_after=1.0, at_most=30)
    finally:
        proc.kill()


def test_a_start_that_never_serves_is_bounded(tmp_path: Path) -> None:
    proc = started("while True: pass", tmp_path / "log")
    try:
        with pytest.raises(ClusterError, match="still not serving after"):
            wait_until_serving(
                "spinning", proc, lambda: False, tmp_path / "log", stalled_after=5, at_most=1.5
            )
    finally:
        proc.kill()
