"""The development stack's errors (its servers, the registry, the tools) on the library's base class, and how the
command line reports them."""

from __future__ import annotations

import sys
from collections.abc import Callable

from streaming_pipeline.lakehouse.errors import StreamingPipelineError, first_line


class StackError(StreamingPipelineError):
    """The embedded stack (a server of it) could not start, stop or be found."""


class ReplayError(StreamingPipelineError):
    """A replay cannot start: a bad starting point, a run in flight, a topic that does not exist."""


class BenchError(StreamingPipelineError):
    """A benchmark could not measure what it set out to (the pipeline lost or duplicated rows)."""


class DemoError(StreamingPipelineError):
    """A stage of the demo failed; the message says which and why."""


class RegistryError(StreamingPipelineError):
    """A request the registry answers with an error body `{"error_code": N, "message": "..."}`."""

    def __init__(self, http_status: int, error_code: int, message: str) -> None:
        super().__init__(message)
        self.http_status = http_status
        self.error_code = error_code
        self.message = message

    def to_body(self) -> dict[str, object]:
        return {"error_code": self.error_code, "message": self.message}


class InvalidSchemaError(StreamingPipelineError, ValueError):
    """The schema text (or one of its references) is not a valid Avro schema; the routes answer it with
    `invalid_schema` (422). A ValueError too, as the JSON and Avro parsers' own errors are."""


def exit_code(command: Callable[[], int | None], *, first_line_only: bool = False) -> int:
    """Run a command-line ``command`` and return its exit code (None counts as 0). The project's errors and the
    operating system's (a folder that cannot be made) are one ``error:`` message on stderr and code 1, only the
    first line of it with ``first_line_only``; Ctrl-C is ``error: interrupted`` and 130. Any other exception is a
    bug and keeps its traceback."""
    try:
        return int(command() or 0)
    except (StreamingPipelineError, OSError) as exc:
        print(f"error: {first_line(exc) if first_line_only else exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("error: interrupted", file=sys.stderr)
        return 130
