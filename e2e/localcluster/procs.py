"""Start, check and stop the cluster's processes, strictly by the PIDs this tool recorded."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from localcluster.util import TLSClient, http_get, say


@dataclass
class Component:
    """One process of the cluster: how to run it and how to tell it is healthy."""

    name: str
    argv: list[str]
    port: int
    health_url: str
    # "https-ca": verify with the cluster CA and present the admin cert (apiserver);
    # "https-self": self-signed serving cert (controller-manager, scheduler); "http".
    health_tls: str = "http"
    health_body: str | None = None  # substring the health response must contain
    env: dict[str, str] = field(default_factory=dict)
    pid: int | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "argv": self.argv,
            "port": self.port,
            "health_url": self.health_url,
            "health_tls": self.health_tls,
            "health_body": self.health_body,
            "env": self.env,
            "pid": self.pid,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Component:
        return cls(
            name=str(data["name"]),
            argv=[str(a) for a in data["argv"]],
            port=int(data["port"]),
            health_url=str(data["health_url"]),
            health_tls=str(data.get("health_tls", "http")),
            health_body=data.get("health_body"),
            env={str(k): str(v) for k, v in dict(data.get("env", {})).items()},
            pid=int(data["pid"]) if data.get("pid") is not None else None,
        )


def _cmdline(pid: int) -> list[str] | None:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return None
    return [p.decode(errors="replace") for p in raw.split(b"\0") if p]


def _is_zombie(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    # Field 3, after the parenthesised command name (which may itself contain spaces).
    return stat.rsplit(")", 1)[-1].split()[0] in ("Z", "X")


def is_ours(pid: int | None, argv0: str) -> bool:
    """Alive and still running our binary: guards against a recycled PID."""
    if pid is None or pid <= 0:
        return False
    cmd = _cmdline(pid)
    if not cmd:
        # Just after exec the kernel shows an empty cmdline for a moment; the executable is already known.
        try:
            running = os.readlink(f"/proc/{pid}/exe")
        except OSError:
            return False
        if running != os.path.realpath(argv0):
            return False
    elif cmd[0] != argv0:
        return False
    return not _is_zombie(pid)


class Processes:
    """Owns the pid files and logs under the state folder."""

    def __init__(self, state: Path, tls: TLSClient) -> None:
        self.state = state
        self.tls = tls
        self.pid_dir = state / "pids"
        self.log_dir = state / "logs"
        self._popen: dict[str, subprocess.Popen[bytes]] = {}

    def log_path(self, name: str) -> Path:
        return self.log_dir / f"{name}.log"

    def pid_path(self, name: str) -> Path:
        return self.pid_dir / f"{name}.pid"

    def start(self, comp: Component) -> None:
        self.pid_dir.mkdir(parents=True, exist_ok=True)
        self.log_dir.mkdir(parents=True, exist_ok=True)
        log = self.log_path(comp.name)
        env = dict(os.environ)
        env.pop("KUBECONFIG", None)  # every component gets its kubeconfig by flag
        env.update(comp.env)
        with log.open("ab") as out:
            out.write(f"\n==== {time.strftime('%Y-%m-%dT%H:%M:%S')} {' '.join(comp.argv)}\n".encode())
            out.flush()
            # A new session: the process outlives `cluster.sh up` and ignores its Ctrl-C.
            proc = subprocess.Popen(
                comp.argv,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                cwd=self.state,
                env=env,
                start_new_session=True,
            )
        comp.pid = proc.pid
        self._popen[comp.name] = proc
        self.pid_path(comp.name).write_text(f"{proc.pid}\n")
        say(f"{comp.name}: started pid {proc.pid} on 127.0.0.1:{comp.port} (log {log})")

    def alive(self, comp: Component) -> bool:
        proc = self._popen.get(comp.name)
        if proc is not None:
            return proc.poll() is None  # our own child: its handle is the truth
        return is_ours(comp.pid, comp.argv[0])

    def healthy(self, comp: Component) -> bool:
        if comp.health_tls == "https-ca":
            tls: TLSClient | None = self.tls
        elif comp.health_tls == "https-self":
            tls = TLSClient(verify=False)
        else:
            tls = None
        status, body = http_get(comp.health_url, tls, timeout=2.0)
        if status != 200:
            return False
        return comp.health_body is None or comp.health_body in body

    def settle(self, comp: Component, timeout: float = 30.0) -> str:
        """A component found running but unhealthy (say, stopped a moment ago and still shutting down):
        wait until it is healthy again or gone; one still neither after `timeout` is stopped. Returns
        "healthy", "exited" or "stopped" (then it can be started afresh)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if not self.alive(comp):
                return "exited"
            if self.healthy(comp):
                return "healthy"
            time.sleep(0.2)
        for note in self.stop_all([comp]):
            say(note)
        return "stopped"

    def death_note(self, comp: Component) -> str | None:
        """Why waiting is pointless: the process is gone (with its log's last lines)."""
        if self.alive(comp):
            return None
        tail = ""
        log = self.log_path(comp.name)
        if log.exists():
            lines = log.read_text(errors="replace").splitlines()[-15:]
            tail = "\n    " + "\n    ".join(lines)
        return f"process exited; last lines of {log}:{tail}"

    def stop_all(self, comps: Sequence[Component], timeout: float = 15.0) -> list[str]:
        """SIGTERM all (in the given order), wait, then SIGKILL stragglers. Returns notes."""
        notes: list[str] = []
        pending: dict[str, int] = {}
        for comp in comps:
            pid = comp.pid
            if pid is None and self.pid_path(comp.name).exists():
                try:
                    pid = int(self.pid_path(comp.name).read_text().strip())
                except ValueError:
                    pid = None
            if pid is None:
                notes.append(f"{comp.name}: no pid recorded")
                continue
            if not is_ours(pid, comp.argv[0]):
                notes.append(f"{comp.name}: pid {pid} not running (or not ours); nothing to stop")
                continue
            try:
                os.kill(pid, signal.SIGTERM)
                pending[comp.name] = pid
            except ProcessLookupError:
                notes.append(f"{comp.name}: pid {pid} already gone")
        deadline = time.monotonic() + timeout
        while pending and time.monotonic() < deadline:
            for name, pid in list(pending.items()):
                if not is_ours(pid, _argv0(comps, name)):
                    notes.append(f"{name}: pid {pid} stopped")
                    self.pid_path(name).unlink(missing_ok=True)
                    del pending[name]
            if pending:
                time.sleep(0.1)
        for name, pid in pending.items():
            try:
                os.kill(pid, signal.SIGKILL)
                notes.append(f"{name}: pid {pid} did not stop within {timeout:.0f}s; killed")
            except ProcessLookupError:
                notes.append(f"{name}: pid {pid} stopped")
            self.pid_path(name).unlink(missing_ok=True)
        return notes


def _argv0(comps: Sequence[Component], name: str) -> str:
    for c in comps:
        if c.name == name:
            return c.argv[0]
    return ""
