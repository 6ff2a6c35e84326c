"""The checks of a `KafkaDeltaSource`'s fields, as Dagster's resolvers run them when a `defs.yaml` loads: each names
the field, the value and what it must be."""

from __future__ import annotations

import json
import re
from pathlib import Path

import dagster as dg
import fastavro

from streaming_pipeline.lakehouse.errors import ConfigurationError
from streaming_pipeline.lakehouse.schemas import avro_columns

#: Kafka's legal topic names (kafka.common.internals.Topic): ASCII letters, digits, '.', '_', '-', at most 249.
_KAFKA_TOPIC = re.compile(r"^[a-zA-Z0-9._-]{1,249}$")
#: A table name that is a Dagster asset key, a Delta directory and a Spark SQL identifier without quoting.
_TABLE_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def topic_name(context: dg.ResolutionContext, value: str) -> str:
    if not _KAFKA_TOPIC.match(value) or value in {".", ".."}:
        raise ConfigurationError(
            f"topic {value!r} is not a Kafka topic name: 1 to 249 ASCII letters, digits, '.', '_' or '-'"
        )
    return value


def table_name(context: dg.ResolutionContext, value: str | None) -> str | None:
    if value is not None and not _TABLE_NAME.match(value):
        raise ConfigurationError(
            f"table {value!r} is not a table name: a letter or '_', then letters, digits or '_' (it names the "
            "asset, the Delta table's directory and the SQL view)"
        )
    return value


def schema_file(context: dg.ResolutionContext, value: str, *, field: str) -> str:
    """The schema file's absolute path, after checking that it holds a valid Avro schema."""
    path = context.resolve_source_relative_path(value)
    if not path.is_file():
        raise ConfigurationError(f"{field} {value!r}: no such file {path} (a path relative to this defs.yaml)")
    try:
        fastavro.parse_schema(json.loads(path.read_text()))
    except (ValueError, TypeError, KeyError, fastavro.schema.SchemaParseException) as exc:
        raise ConfigurationError(f"{field} {value!r}: {path} is not a valid Avro schema: {exc}") from exc
    return str(path)


def value_schema_file(context: dg.ResolutionContext, value: str) -> str:
    path = schema_file(context, value, field="value_schema")
    try:
        avro_columns(Path(path).read_text())
    except ConfigurationError as exc:
        raise ConfigurationError(f"value_schema {value!r}: {exc}") from exc
    return path


def key_schema_file(context: dg.ResolutionContext, value: str | None) -> str | None:
    return None if value is None else schema_file(context, value, field="key_schema")
