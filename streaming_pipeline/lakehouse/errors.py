"""Every exception the pipeline library and the code location raise on purpose, in one hierarchy rooted at
StreamingPipelineError (nothing raises the bare base class); the development stack's own errors extend it in
`streaming_pipeline.devstack.errors`. Every message names what was wrong and where."""

from __future__ import annotations


class StreamingPipelineError(Exception):
    """Base class of every error this project raises on purpose."""


class ConfigurationError(StreamingPipelineError):
    """A setting (environment variable, resource field, CLI flag) has a bad value."""


class JavaNotFoundError(StreamingPipelineError):
    """No usable `java` on PATH or under JAVA_HOME."""


class ArtifactResolutionError(StreamingPipelineError):
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


class StreamingTableStateError(StreamingPipelineError):
    """A streaming table holds rows while its query's checkpoint is missing; running on would append them again."""


class SchemaEvolutionError(StreamingPipelineError):
    """A micro-batch's columns cannot join its Delta table (a column's type changed); nothing of it was written."""


class StreamingRunError(StreamingPipelineError):
    """A streaming query failed; the message names the query and Spark's reason."""


class ExpectationError(StreamingPipelineError):
    """A table's expectation cannot be evaluated on its rows (an unknown column, not a boolean); nothing was read."""


class MaintenanceError(StreamingPipelineError):
    """A table cannot be maintained (OPTIMIZE, VACUUM): it does not exist, or a run that writes it is in flight."""


class IncompleteResolution(ArtifactResolutionError):
    """Ivy finished but some jars are missing or damaged; `modules` are (organisation, module) pairs."""

    def __init__(self, message: str, modules: list[tuple[str, str]]) -> None:
        super().__init__(message)
        self.modules = modules


def first_line(exc: BaseException) -> str:
    """The first non-blank line of ``exc``'s message (its class name when it has none)."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    return lines[0] if lines else type(exc).__name__
