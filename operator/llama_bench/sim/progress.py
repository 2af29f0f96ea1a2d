"""Progress lines of the long runs (bench, family, frontier, scale to zero, profile): one callable."""

from __future__ import annotations

from collections.abc import Callable

Progress = Callable[[str], None]


def prefixed(progress: Progress, prefix: str) -> Progress:
    """The same progress, each line starting with `prefix` (e.g. "(3/18 flash-2x) ")."""

    def report(line: str) -> None:
        progress(prefix + line)

    return report
