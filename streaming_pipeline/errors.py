"""Project exceptions. Every message names what was wrong and where."""

from __future__ import annotations


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
