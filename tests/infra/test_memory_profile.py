"""The scale benchmark's memory profile: the operator's largest live allocations by source line."""

from __future__ import annotations

import tracemalloc
from pathlib import Path

from llama_operator.handlers.startup import write_memory_profile


def test_the_profile_names_the_line_that_holds_the_memory(tmp_path: Path) -> None:
    tracemalloc.start(4)
    try:
        held = [bytes(1024) for _ in range(4096)]  # about 4 MiB, allocated on this line
        write_memory_profile(tmp_path / "memory.txt", top=5)
    finally:
        tracemalloc.stop()
    text = (tmp_path / "memory.txt").read_text()
    assert text.startswith("traced Python memory:")
    assert "test_memory_profile.py" in text.splitlines()[1]
    assert len(held) == 4096
