"""The source topics, one declaration each: a module in this package that defines `SOURCE = SourceTopic(...)`.

Everything about a topic is derived from its declaration: its bronze table (columns from the value schema), the
bronze asset, its checks, its offset sensor and live job (`defs/bronze`), replay's choices and the producer's
topic choice. Adding a topic is one module here plus its two `.avsc` files in `schemas/` (docs/extending.md).
Plain Python: the foreachBatch handlers and the command line read it without Dagster.
"""

from __future__ import annotations

import importlib
import pkgutil
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from streaming_pipeline.errors import ConfigurationError
from streaming_pipeline.schemas import avro_columns, load_schema

if TYPE_CHECKING:
    from streaming_pipeline.tables import Table


@dataclass(frozen=True)
class SourceTopic:
    """A Kafka topic of Avro records (key and value in the Confluent wire format) and the bronze table it lands in."""

    topic: str
    bronze_table: str
    #: The value's Avro schema: a file name in `schemas/`, or an absolute path (a component's `value_schema`).
    value_schema: str
    description: str
    #: The key's Avro schema, as `value_schema`; None when the topic's keys are not Avro (bronze ignores keys).
    key_schema: str | None = None
    #: The value's field that is the record key (what `streaming-pipeline produce` sends as the key).
    key_field: str = ""
    #: The name `streaming-pipeline produce` takes for this topic (default: the topic).
    produce_name: str = ""
    #: CSV column -> Avro field, for a CSV whose header is not the field names (the TLC exports).
    csv_columns: dict[str, str] = field(default_factory=dict)

    @property
    def cli_name(self) -> str:
        return self.produce_name or self.topic

    @property
    def table(self) -> Table:
        """The bronze table: the value schema's fields, then the Kafka coordinates."""
        from streaming_pipeline.tables import BRONZE, KAFKA_COLUMNS, Table  # tables names its bronze tables from here

        return Table(self.bronze_table, BRONZE, (*avro_columns(load_schema(self.value_schema)), *KAFKA_COLUMNS))

    @property
    def key_subject(self) -> str:
        """Topic name strategy, as Confluent's serializers use by default."""
        return f"{self.topic}-key"

    @property
    def value_subject(self) -> str:
        return f"{self.topic}-value"


def all_sources() -> tuple[SourceTopic, ...]:
    """Every `SOURCE` declared in a module of this package, in module-name order."""
    found: list[SourceTopic] = []
    for module_info in sorted(pkgutil.iter_modules(__path__), key=lambda m: m.name):
        module = importlib.import_module(f"{__name__}.{module_info.name}")
        source = getattr(module, "SOURCE", None)
        if not isinstance(source, SourceTopic):
            raise ConfigurationError(f"{module.__name__} declares no SOURCE = SourceTopic(...)")
        found.append(source)
    topics = [s.topic for s in found]
    tables = [s.bronze_table for s in found]
    for names, what in ((topics, "topic"), (tables, "bronze table")):
        twice = sorted({n for n in names if names.count(n) > 1})
        if twice:
            raise ConfigurationError(f"more than one source declares the {what} {', '.join(twice)}")
    return tuple(found)


def source_for_topic(topic: str) -> SourceTopic:
    for source in all_sources():
        if source.topic == topic:
            return source
    raise ConfigurationError(f"unknown topic {topic!r}; choose one of {', '.join(s.topic for s in all_sources())}")
