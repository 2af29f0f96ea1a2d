"""Small shared helpers: progress output, subprocesses with logs, ports, HTTP probes."""

from __future__ import annotations

import contextlib
import fcntl
import os
import random
import socket
import ssl
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from localcluster.config import cache_dir

_T0 = time.monotonic()


def say(msg: str) -> None:
    """Progress line on stderr, prefixed with seconds since start, flushed at once."""
    print(f"[cluster {time.monotonic() - _T0:6.1f}s] {msg}", file=sys.stderr, flush=True)


def fmt_duration(seconds: float) -> str:
    m, s = divmod(int(seconds), 60)
    return f"{m}m{s:02d}s" if m else f"{seconds:.1f}s"


class ClusterError(RuntimeError):
    """A step failed; the message says which and where its log is."""


def _ephemeral_low() -> int:
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def port_ledger() -> Path:
    """One file per reserved port, naming the state folder that holds it; shared by every local
    cluster (and component sandbox) on this machine."""
    return cache_dir() / "ports"


def reserve_port(
    owner: Path,
    host: str = "127.0.0.1",
    taken: set[int] | None = None,
    span: tuple[int, int] | None = None,
) -> int:
    """A free port below the kernel's ephemeral range, so that no outgoing connection can
    be holding it when a component is restarted later on the same port; held for `owner` (a state
    folder) in the port ledger until `release_ports(owner)`. A cluster's fleet port is only
    reserved, and bound long after `up` when a fleet simulator starts: without the ledger another
    cluster started meanwhile could pick it (CI once saw the demo's fleet simulator refused with
    "Address already in use" and its load sent to another cluster's process). An entry whose owner
    folder is gone is stale and handed out again. `taken` avoids repeats within one call site; `span`
    (inclusive) narrows the range, for tests."""
    taken = taken if taken is not None else set()
    owner = owner.resolve()
    low, high = span or (20000, max(_ephemeral_low() - 1, 20001))
    rng = random.Random()
    ledger = port_ledger()
    ledger.mkdir(parents=True, exist_ok=True)
    with open(ledger / ".lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        for _ in range(400):
            port = rng.randint(low, high)
            if port in taken or _held_by_another(ledger / str(port), owner):
                continue
            with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
                try:
                    s.bind((host, port))
                except OSError:
                    continue
            (ledger / str(port)).write_text(f"{owner}\n")
            taken.add(port)
            return port
    raise ClusterError(f"no free port found in {low}-{high} (ledger {ledger})")


def _held_by_another(entry: Path, owner: Path) -> bool:
    try:
        holder = Path(entry.read_text().strip())
    except (FileNotFoundError, ValueError):
        return False
    except OSError:
        return True  # unreadable: leave it alone
    return holder != owner and holder.exists()


def release_ports(owner: Path) -> int:
    """Drop `owner`'s ledger entries (and any whose owner folder is gone); how many were dropped."""
    owner = owner.resolve()
    ledger = port_ledger()
    if not ledger.is_dir():
        return 0
    dropped = 0
    with open(ledger / ".lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        for entry in ledger.iterdir():
            if not entry.name.isdigit():
                continue
            try:
                holder = Path(entry.read_text().strip())
            except OSError:
                continue
            if holder == owner or not holder.exists():
                entry.unlink(missing_ok=True)
                dropped += 1
    return dropped


def one_off_port(host: str = "127.0.0.1") -> int:
    """A port for a listener started once and never restarted on the same port, held in the port ledger for
    as long as this process lives (its /proc folder is the owner): below the kernel's ephemeral range, so no
    outgoing connection can take it between this choice and the bind (CI saw an operator refused with
    "Address already in use" when one-off ports came from the ephemeral range), and never a port a cluster
    reserved."""
    return reserve_port(Path(f"/proc/{os.getpid()}"), host, taken=_ONE_OFF_PORTS)


_ONE_OFF_PORTS: set[int] = set()  # handed out by this process: the ledger lets an owner take its own again


def port_open(port: int, host: str = "127.0.0.1", timeout: float = 0.5) -> bool:
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


@dataclass(frozen=True)
class TLSClient:
    """Client TLS material for probing the apiserver and friends."""

    ca: Path | None = None
    cert: Path | None = None
    key: Path | None = None
    verify: bool = True

    def context(self) -> ssl.SSLContext:
        ctx = ssl.create_default_context(cafile=str(self.ca) if self.ca else None)
        if not self.verify:
            ctx.check_hostname = False
            ctx.verify_mode = ssl.CERT_NONE
        if self.cert and self.key:
            ctx.load_cert_chain(str(self.cert), str(self.key))
        return ctx


def http_get(url: str, tls: TLSClient | None = None, timeout: float = 3.0) -> tuple[int, str]:
    """(status, body); status 0 when nothing answered."""
    ctx = tls.context() if (tls and url.startswith("https")) else None
    req = urllib.request.Request(url, headers={"Accept": "*/*"})
    try:
        with urllib.request.urlopen(req, timeout=timeout, context=ctx) as resp:
            return int(resp.status), resp.read().decode("utf-8", "replace")
    except urllib.error.HTTPError as e:
        return int(e.code), e.read().decode("utf-8", "replace")
    except (urllib.error.URLError, OSError, ssl.SSLError):
        return 0, ""


def http_post(url: str, timeout: float = 5.0) -> int:
    """POST with an empty body (Prometheus /-/reload); the status, 0 when nothing answered."""
    req = urllib.request.Request(url, data=b"", method="POST")
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            return int(resp.status)
    except urllib.error.HTTPError as e:
        return int(e.code)
    except (urllib.error.URLError, OSError):
        return 0


def wait_until(
    what: str,
    check: Callable[[], bool],
    timeout: float,
    interval: float = 0.5,
    alive: Callable[[], str | None] | None = None,
) -> float:
    """Poll `check` until true; `alive` returns a reason to give up early (process died)."""
    start = time.monotonic()
    last_note = start
    while True:
        if check():
            took = time.monotonic() - start
            say(f"{what}: ready after {fmt_duration(took)}")
            return took
        if alive is not None:
            reason = alive()
            if reason:
                raise ClusterError(f"{what}: {reason}")
        now = time.monotonic()
        if now - start > timeout:
            raise ClusterError(f"{what}: not ready after {fmt_duration(timeout)}")
        if now - last_note >= 10:
            say(f"{what}: still waiting ({fmt_duration(now - start)})")
            last_note = now
        time.sleep(interval)


def run(
    cmd: Sequence[str | os.PathLike[str]],
    *,
    cwd: Path | None = None,
    env: Mapping[str, str] | None = None,
    check: bool = True,
    input_text: str | None = None,
) -> subprocess.CompletedProcess[str]:
    """Run quietly, capture output; on failure raise with the tail of stderr."""
    proc = subprocess.run(
        [str(c) for c in cmd],
        cwd=cwd,
        env=dict(env) if env is not None else None,
        input=input_text,
        capture_output=True,
        text=True,
        check=False,
    )
    if check and proc.returncode != 0:
        tail = (proc.stderr or proc.stdout).strip()[-2000:]
        raise ClusterError(f"command failed ({proc.returncode}): {' '.join(map(str, cmd))}\n{tail}")
    return proc


def run_logged(
    cmd: Sequence[str | os.PathLike[str]],
    *,
    log: Path,
    what: str,
    cwd: Path | None = None,
    env: Mapping[str, str] | None = None,
    every: float = 20.0,
    count_lines: str | None = None,
) -> None:
    """Long step: output to `log`, a progress line every `every` seconds.

    `count_lines` names what each output line means (e.g. "packages" for `go build -v`),
    so progress says how far along it is rather than only how long it has taken.
    """
    log.parent.mkdir(parents=True, exist_ok=True)
    start = time.monotonic()
    lines = 0
    say(f"{what}: started (log: {log})")
    with log.open("w") as out:
        out.write(f"$ {' '.join(map(str, cmd))}\n")
        out.flush()
        proc = subprocess.Popen(
            [str(c) for c in cmd],
            cwd=cwd,
            env=dict(env) if env is not None else None,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        assert proc.stdout is not None
        stop = threading.Event()

        def ticker() -> None:
            while not stop.wait(every):
                counted = f", {lines} {count_lines}" if count_lines else ""
                say(f"{what}: running {fmt_duration(time.monotonic() - start)}{counted}")

        t = threading.Thread(target=ticker, daemon=True)
        t.start()
        try:
            for line in proc.stdout:
                out.write(line)
                out.flush()  # so `tail -f` on the log follows the build
                lines += 1
            rc = proc.wait()
        finally:
            stop.set()
    if rc != 0:
        tail = log.read_text(errors="replace").strip().splitlines()[-25:]
        raise ClusterError(f"{what} failed (exit {rc}); log {log}:\n" + "\n".join(tail))
    say(f"{what}: done in {fmt_duration(time.monotonic() - start)}")


@contextlib.contextmanager
def file_lock(path: Path, what: str) -> Iterator[None]:
    """Exclusive lock so two concurrent `up`s do not build or start the same thing twice."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a+") as fh:
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            say(f"{what}: another process holds {path}; waiting")
            fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def atomic_write(path: Path, text: str, mode: int = 0o644) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    tmp.write_text(text)
    tmp.chmod(mode)
    tmp.replace(path)


# Tests never build or install an upstream tool: a cold build (minutes) outruns a test's timeout and fails
# only on a fresh machine. The test suites' conftests set this variable; every build and install below checks
# it where it would start, and names the set-up step that builds them all before any test starts.
NO_BUILDS_ENV = "LLAMA_OPERATOR_NO_BUILDS"
SETUP_COMMAND = "bash e2e/cluster.sh test-tools"


def may_build(what: str) -> None:
    """Raise instead of building `what` where builds are refused (inside the tests)."""
    if os.environ.get(NO_BUILDS_ENV):
        raise ClusterError(
            f"{what} is missing and the tests never build it ({NO_BUILDS_ENV} is set): run `{SETUP_COMMAND}` first"
        )


def log_tail(log: Path, lines: int = 40) -> str:
    """The last `lines` lines of a process's log ("" before it has one)."""
    return "\n".join(log.read_text(errors="replace").splitlines()[-lines:]) if log.exists() else ""


def _cpu_ticks(pid: int) -> int:
    """The CPU time a process and its waited-for children used, in clock ticks (0 once it is gone)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return 0
    return sum(int(f) for f in fields[11:15])  # utime, stime, cutime, cstime


# A process that neither uses the CPU nor writes to its log this long is stuck, not slow.
STALLED_SECONDS = 90.0
# The bound past which a start that still progresses is given up on (pytest's own timeouts are longer).
START_AT_MOST_SECONDS = 420.0


def wait_until_serving(
    what: str,
    proc: subprocess.Popen[bytes],
    serving: Callable[[], bool],
    log: Path,
    *,
    stalled_after: float = STALLED_SECONDS,
    at_most: float = START_AT_MOST_SECONDS,
) -> float:
    """Wait until `serving()` while `proc` is alive and making progress (its CPU time or its log grows), and
    return the seconds it took. A start takes what the host gives it: a fixed short wait failed the fleet
    simulator on a busy host while it was still importing. Raises, with the log's tail, at once when the
    process exits, or when it stalled `stalled_after` seconds, or after `at_most` seconds."""
    start = time.monotonic()
    progress, progressed_at = (-1, -1), start
    while not serving():
        now = time.monotonic()
        if proc.poll() is not None:
            raise ClusterError(
                f"{what} exited with {proc.returncode} before serving; {log}:\n{log_tail(log)}"
            )
        mark = (_cpu_ticks(proc.pid), log.stat().st_size if log.exists() else 0)
        if mark != progress:
            progress, progressed_at = mark, now
        elif now - progressed_at > stalled_after:
            raise ClusterError(
                f"{what} is not serving and used no CPU and wrote nothing for {stalled_after:.0f} s "
                f"(after {fmt_duration(now - start)}); {log}:\n{log_tail(log)}"
            )
        if now - start > at_most:
            raise ClusterError(
                f"{what} still not serving after {fmt_duration(now - start)}; {log}:\n{log_tail(log)}"
            )
        time.sleep(0.2)
    return time.monotonic() - start


def apt_install(package: str, probe: Path) -> None:
    """apt-get install, waiting for dpkg/apt locks another installer may hold."""
    if probe.exists():
        return
    may_build(f"{probe} (Debian package {package})")
    if os.geteuid() != 0:
        raise ClusterError(f"{probe} is missing; as root run: apt-get install {package}")
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    lock_opts = ["-o", "DPkg::Lock::Timeout=900"]
    for attempt in range(60):
        if probe.exists():
            return
        say(f"apt: installing {package}" + (f" (retry {attempt})" if attempt else ""))
        upd = subprocess.run(
            ["apt-get", *lock_opts, "update", "-qq"], env=env, capture_output=True, text=True, check=False
        )
        if upd.returncode == 0:
            inst = subprocess.run(
                ["apt-get", *lock_opts, "install", "-y", "-qq", "--no-install-recommends", package],
                env=env,
                capture_output=True,
                text=True,
                check=False,
            )
            if inst.returncode == 0 and probe.exists():
                return
            err = inst.stderr
        else:
            err = upd.stderr
        if "lock" not in err.lower():
            raise ClusterError(f"apt-get install {package} failed:\n{err.strip()[-1500:]}")
        say("apt: another apt/dpkg holds the lock; waiting")
        time.sleep(10)
    raise ClusterError(f"apt-get install {package}: lock never freed")
