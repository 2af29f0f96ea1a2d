"""The llama-bench command without its extra: a plotting command says what to install at once, instead of
running for minutes and failing at the first figure (exit 70, an empty output folder)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

# matplotlib made unimportable in a fresh interpreter, as after `pip install -e .` without the extra.
WITHOUT_MATPLOTLIB = "import sys; sys.modules['matplotlib'] = None; from llama_bench.cli import main; sys.exit(main(sys.argv[1:]))"


def _bench(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", WITHOUT_MATPLOTLIB, *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_bench_without_the_extra_names_it_at_once(tmp_path: Path) -> None:
    done = _bench("bench", "--out", str(tmp_path / "out"))
    assert done.returncode == 1, done.stderr
    assert "pip install -e '.[bench]'" in done.stderr
    assert "Traceback" not in done.stderr
    assert not (tmp_path / "out").exists()


def test_commands_that_draw_nothing_run_without_it() -> None:
    done = _bench("simulate", "--trace", "code", "--policy", "slo", "--accelerator", "t4", "--slo-ttft", "1")
    assert done.returncode == 0, done.stderr
