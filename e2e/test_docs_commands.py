"""Every command README.md and docs/ show is run here as written, or its block says why it cannot be:
`<!-- commands: need a real cluster (...) -->` or `<!-- commands: run by PATH -->` on the line before the
fence. A doc that gains a command nobody runs, or a command that stopped working, fails this test.

How each kind of command runs:
- `make TARGET`: the target exists and `make -n` accepts it (`make demo` and `make test` themselves are
  run by e2e/test_demo.py and by CI).
- `pip install ...`: resolved without installing (`uv pip install --dry-run`), extras included.
- `llama-operator ...` and the bench's commands: run as written from a scratch copy of the repository (so
  `--out` paths do not overwrite committed files), with the local cluster's kubeconfig; `run` must start
  and answer /healthz, then is stopped. The bench's long or server-bound subcommands (a whole benchmark,
  a profile of a live vLLM, the fleet simulator, which runs until stopped) are checked by the bench's own
  argument parser here; their make targets run them in full.
- `kubectl` commands that only read (`get`, `version`, `api-resources`, `explain`): run against the local
  cluster.
- `helm install|upgrade`: rendered with `helm template` and the same chart, namespace and values (the
  `--set` forms included: the chart's schema judges them); an upgrade must keep earlier values
  (`--reuse-values`) and target the namespace the install guide uses.
"""

from __future__ import annotations

import importlib.util
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from support import Cluster, free_port, repo_root

pytestmark = pytest.mark.e2e

SHELL_LANGUAGES = {"bash", "sh", "shell", "console"}
MARKER = re.compile(r"<!--\s*commands:\s*(?P<why>.+?)\s*-->")
BIN = Path(sys.executable).parent
# The commands of our own programs, run as written.
OWN_PROGRAMS = {"llama-operator", "llama-bench"}
# Subcommands that run for minutes or need a live server: their arguments are checked, not run.
PARSED_ONLY = {
    ("llama-bench", "bench"),
    ("llama-bench", "profile"),
    ("llama-bench", "replay"),
    ("llama-bench", "fleet-sim"),
    ("llama-bench", "fleet-drive"),
}
PARSE_ONLY_SCRIPT = (
    "import sys; from llama_bench.cli import build_parser; build_parser().parse_args(sys.argv[1:])"
)
INSTALL_NAMESPACE = "llama-operator"  # docs/install.md's: every other helm command in the docs uses it too


def _markdown() -> Any:
    spec = importlib.util.spec_from_file_location(
        "doc_markdown", repo_root() / "tests" / "docs" / "markdown.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


@dataclass(frozen=True)
class Command:
    doc: str
    line: int
    text: str

    @property
    def argv(self) -> list[str]:
        return shlex.split(self.text)

    def __str__(self) -> str:
        return f"{self.doc}:{self.line}: {self.text}"


def _docs() -> list[Path]:
    root = repo_root()
    return [root / "README.md", *sorted((root / "docs").rglob("*.md"))]


def _commands_of(text: str) -> list[str]:
    """A block's commands: continuation lines joined, comments and blank lines dropped."""
    out: list[str] = []
    pending = ""
    for raw in text.splitlines():
        line = raw.rstrip()
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        line = pending + line
        pending = ""
        try:
            words = shlex.split(line, comments=True)
        except ValueError:  # not a shell line: kept as it is, and the test of it says so
            out.append(line.strip())
            continue
        if words:
            out.append(shlex.join(words))
    return out


def doc_commands() -> tuple[list[Command], list[tuple[str, int, str]]]:
    """(commands to run, blocks marked as not run here with their reason)."""
    markdown = _markdown()
    run: list[Command] = []
    marked: list[tuple[str, int, str]] = []
    for path in _docs():
        text = path.read_text()
        lines = text.splitlines()
        name = str(path.relative_to(repo_root()))
        for block in markdown.code_blocks(text):
            first = block.text.split()[0] if block.text.split() else ""
            shell = block.language in SHELL_LANGUAGES or (
                block.language == "" and (first in OWN_PROGRAMS or first in {"make", "helm", "kubectl"})
            )
            if not shell:
                continue
            before = next((ln for ln in reversed(lines[: block.line - 1]) if ln.strip()), "")
            marker = MARKER.search(before)
            if marker:
                marked.append((name, block.line, marker.group("why")))
                continue
            run += [Command(name, block.line, c) for c in _commands_of(block.text)]
    return run, marked


COMMANDS, MARKED = doc_commands()


def test_the_docs_show_commands() -> None:
    assert len(COMMANDS) >= 10, COMMANDS


@pytest.mark.parametrize(("doc", "line", "why"), MARKED, ids=[f"{d}:{n}" for d, n, _ in MARKED])
def test_a_block_not_run_here_says_why(doc: str, line: int, why: str) -> None:
    run_by = re.fullmatch(r"run by (?P<path>\S+)", why)
    if run_by:  # the test named exists and reads this doc
        test = repo_root() / run_by.group("path")
        assert test.is_file(), f"{doc}:{line}: {test} does not exist"
        assert Path(doc).name in test.read_text(), f"{test} does not read {doc}"
    else:
        assert why.startswith("need a real cluster ("), f"{doc}:{line}: unknown reason {why!r}"


def _scratch_repo(tmp_path: Path) -> Path:
    """The repository's files without its git data, venv or cluster state: commands writing `--out DIR`
    write there, not over committed results."""
    root = repo_root()
    scratch = tmp_path / "repo"
    ignore = shutil.ignore_patterns(".git", ".venv", ".cluster", "bench-out", "__pycache__", "*.egg-info")
    shutil.copytree(root, scratch, ignore=ignore, symlinks=True)
    return scratch


def _run_own_program(command: Command, cluster: Cluster, tmp_path: Path) -> None:
    argv = command.argv
    env = {**os.environ, "KUBECONFIG": str(cluster.info.kubeconfig), "MPLBACKEND": "Agg"}
    cwd = _scratch_repo(tmp_path)
    program = [str(BIN / argv[0]), *argv[1:]]
    if tuple(argv[:2]) in PARSED_ONLY:
        program = [sys.executable, "-c", PARSE_ONLY_SCRIPT, *argv[1:]]
    if argv[1:2] == ["run"]:  # the operator: it starts, answers /healthz, and is stopped
        health = free_port()
        env |= {
            "LLAMA_OPERATOR_LISTEN_ADDRESS": "127.0.0.1",
            "LLAMA_OPERATOR_HEALTH_PORT": str(health),
            "LLAMA_OPERATOR_METRICS_PORT": "0",
            "LLAMA_OPERATOR_LEADER_ELECTION_LEASE": f"docs-{health}",
        }
        log = (tmp_path / "run.log").open("wb")
        proc = subprocess.Popen(program, cwd=cwd, env=env, stdout=log, stderr=subprocess.STDOUT)
        try:
            deadline = time.monotonic() + 90
            while time.monotonic() < deadline:
                assert proc.poll() is None, (
                    f"{command} exited {proc.returncode}: {(tmp_path / 'run.log').read_text()[-3000:]}"
                )
                try:
                    with urllib.request.urlopen(f"http://127.0.0.1:{health}/healthz", timeout=2) as r:
                        if r.status == 200:
                            return
                except OSError:
                    pass
                time.sleep(0.5)
            pytest.fail(f"{command}: no /healthz in 90 s")
        finally:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
    done = subprocess.run(program, cwd=cwd, env=env, capture_output=True, text=True, timeout=600, check=False)
    assert done.returncode == 0, f"{command}: exit {done.returncode}\n{done.stderr[-3000:]}"


def _template_args(argv: list[str]) -> list[str]:
    """`helm install|upgrade [--install] NAME CHART FLAGS` as `helm template NAME CHART FLAGS`."""
    dropped_flags = {"--create-namespace", "--reuse-values", "--install", "--wait", "--atomic"}
    rest = [a for a in argv[2:] if a not in dropped_flags and not a.startswith("--timeout")]
    return ["template", *rest]


def _run_helm(command: Command, cluster: Cluster) -> None:
    argv = command.argv
    assert argv[1] in {"install", "upgrade"}, f"{command}: only install and upgrade are checked"
    namespace = argv[argv.index("-n") + 1] if "-n" in argv else argv[argv.index("--namespace") + 1]
    assert namespace == INSTALL_NAMESPACE, f"{command}: another namespace than the install guide's"
    if argv[1] == "upgrade":
        assert "--reuse-values" in argv, f"{command}: drops the values of the install (add --reuse-values)"
    done = subprocess.run(
        [str(cluster.info.helm_path), *_template_args(argv)],
        cwd=repo_root(),
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, f"{command}: {done.stderr}"


# kubectl commands that only read: run against the local cluster (the prerequisites' checks).
KUBECTL_READS = {"version", "get", "api-resources", "explain"}


def _run_kubectl(command: Command, cluster: Cluster) -> None:
    verb = command.argv[1] if len(command.argv) > 1 else ""
    assert verb in KUBECTL_READS, (
        f"{command}: kubectl {verb} changes a cluster; mark its block `<!-- commands: need a real cluster (why) -->`"
    )
    done = cluster.kubectl(*command.argv[1:], check=False)
    assert done.returncode == 0, f"{command}: {done.stderr}"


def _run_make(command: Command) -> None:
    targets = [a for a in command.argv[1:] if not a.startswith("-") and "=" not in a]
    makefile = (repo_root() / "Makefile").read_text()
    for target in targets:
        assert re.search(rf"^{re.escape(target)}:", makefile, re.M), f"{command}: no target {target}"
    done = subprocess.run(
        ["make", "-n", *command.argv[1:]], cwd=repo_root(), capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, f"{command}: {done.stderr}"


def _run_pip(command: Command) -> None:
    argv = command.argv
    assert argv[:2] == ["pip", "install"], command
    uv = BIN / "uv"
    done = subprocess.run(
        [str(uv), "pip", "install", "--dry-run", "--python", sys.executable, *argv[2:]],
        cwd=repo_root(),
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, f"{command}: {done.stderr}"


@pytest.mark.parametrize("command", COMMANDS, ids=[f"{c.doc}:{c.line}:{c.text[:40]}" for c in COMMANDS])
def test_the_command_works_as_written(command: Command, cluster: Cluster, tmp_path: Path) -> None:
    program = command.argv[0]
    if program in OWN_PROGRAMS:
        _run_own_program(command, cluster, tmp_path)
    elif program == "helm":
        _run_helm(command, cluster)
    elif program == "kubectl":
        _run_kubectl(command, cluster)
    elif program == "make":
        _run_make(command)
    elif program == "pip":
        _run_pip(command)
    else:
        pytest.fail(
            f"{command}: not a command this test can run; mark its block "
            "`<!-- commands: need a real cluster (why) -->` or `<!-- commands: run by TEST -->`"
        )
