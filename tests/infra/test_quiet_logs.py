"""Routine kopf successes (one per watch event) are DEBUG lines, not INFO: quiet logs at scale."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest

from llama_operator.handlers.startup import RoutineAtDebug


@pytest.fixture
def kopf_level() -> Iterator[logging.Logger]:
    logger = logging.getLogger("kopf")
    level = logger.level
    yield logger
    logger.setLevel(level)


def record(message: str, level: int = logging.INFO) -> logging.LogRecord:
    return logging.LogRecord("kopf.objects", level, __file__, 1, message, None, None)


def test_routine_lines_are_dropped_at_info(kopf_level: logging.Logger) -> None:
    kopf_level.setLevel(logging.INFO)
    quiet = RoutineAtDebug()
    for message in (
        "Handler 'owned_event' succeeded.",
        "Indexer 'pod_index' succeeded.",
        "Timer 'x' succeeded.",
    ):
        assert not quiet.filter(record(message))
    assert quiet.filter(record("Handler 'x' failed temporarily: boom", logging.ERROR))
    assert quiet.filter(record("reconciled ns/a: 2 object write(s)"))


def test_routine_lines_show_at_debug(kopf_level: logging.Logger) -> None:
    kopf_level.setLevel(logging.DEBUG)
    line = record("Handler 'owned_event' succeeded.")
    assert RoutineAtDebug().filter(line)
    assert line.levelno == logging.DEBUG
