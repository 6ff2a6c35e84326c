"""Project exceptions. Every message names what was wrong and where; :func:`exit_code` reports them on the
command line."""

from __future__ import annotations

import sys
from collections.abc import Callable


class StreamingPipelineError(Exception):
    """Base class of every error this project raises on purpose."""


class ConfigurationError(StreamingPipelineError):
    """A setting (environment variable, resource field, CLI flag) has a bad value."""


class StackError(StreamingPipelineError):
    """The embedded stack (Kafka broker, schema registry) could not start, stop or be found."""


class JavaNotFoundError(StackError):
    """No usable `java` on PATH or under JAVA_HOME."""


class ArtifactResolutionError(StackError):
    """A Java artifact (the broker's jars, Spark's packages) could not be resolved from Maven Central."""


class EngineVersionError(ConfigurationError):
    """The Spark engine's parts do not match: pyspark and delta-spark, or this client and the Spark Connect server."""


class SparkUnavailableError(StreamingPipelineError):
    """No Spark engine: the Spark Connect server does not answer, or a local driver JVM did not start."""


class BrokerUnavailableError(StreamingPipelineError):
    """The Kafka bootstrap servers did not answer in time."""


class SchemaRejectedError(StreamingPipelineError):
    """The schema registry refused a schema (incompatible, invalid)."""


class RegistryUnavailableError(StreamingPipelineError):
    """The schema registry did not answer."""


class InputDataError(StreamingPipelineError):
    """An input file (CSV) is missing or has a malformed row."""


class QueryError(StreamingPipelineError):
    """A SQL query over the lakehouse failed; the message carries Spark's reason on one line."""


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


def first_line(exc: BaseException) -> str:
    """The first non-blank line of ``exc``'s message (its class name when it has none)."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    return lines[0] if lines else type(exc).__name__


class StreamingRunError(StreamingPipelineError):
    """A streaming query failed; the message names the query and Spark's reason."""
