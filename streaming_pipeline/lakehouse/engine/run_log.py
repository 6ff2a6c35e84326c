"""`Log`, where the pipeline's streaming code reports progress: its own module so that `engine.streams` and the
modules it uses (`engine.query_starts`) can all take one without importing each other."""

from __future__ import annotations

from typing import Protocol


class Log(Protocol):
    """Where the streaming code reports progress: a `logging.Logger` or a Dagster run's `context.log`."""

    def info(self, msg: str, /) -> object: ...

    def warning(self, msg: str, /) -> object: ...
