"""The planner's error: its message is meant for the user who wrote the LlamaService."""

from __future__ import annotations


class PlanningError(ValueError):
    """A LlamaService cannot be planned as written; str(error) says why and what to change."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message
