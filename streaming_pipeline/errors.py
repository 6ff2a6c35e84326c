"""Every exception the project raises on purpose, in one hierarchy rooted at StreamingPipelineError (nothing
raises the bare base class). Every message names what was wrong and where; :func:`exit_code` reports them on the
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


class CredentialsError(ConfigurationError):
    """Kafka or the schema registry refused this client's credentials or TLS settings (a wrong password, an unknown
    user, a CA that does not match, a plaintext client at a TLS listener): asking again cannot help. The message
    names the settings to fix and never holds a secret."""


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


class StorageError(StreamingPipelineError):
    """A lakehouse path cannot be read (no filesystem for its scheme, an unreadable file)."""


class BronzeStateError(StreamingPipelineError):
    """A bronze table, its checkpoint and its topic disagree; running on would lose or duplicate records."""


class SchemaEvolutionError(StreamingPipelineError):
    """A micro-batch's columns cannot join its Delta table (a column's type changed); nothing of it was written."""


class StreamingRunError(StreamingPipelineError):
    """A streaming query failed; the message names the query and Spark's reason."""


class MaintenanceError(StreamingPipelineError):
    """A table cannot be maintained (OPTIMIZE, VACUUM): it does not exist, or a run that writes it is in flight."""


class IncompleteResolution(ArtifactResolutionError):
    """Ivy finished but some jars are missing or damaged; `modules` are (organisation, module) pairs."""

    def __init__(self, message: str, modules: list[tuple[str, str]]) -> None:
        super().__init__(message)
        self.modules = modules


# ---------------------------------------------------------------- the development stack's tools


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


def first_line(exc: BaseException) -> str:
    """The first non-blank line of ``exc``'s message (its class name when it has none)."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    return lines[0] if lines else type(exc).__name__
