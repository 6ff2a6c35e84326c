"""A source: a Kafka topic of Avro records (key and value in the Confluent wire format) and the bronze table it lands
in. Plain Python: the foreachBatch handlers and the command line read it without Dagster.

A source is declared as a `streaming_pipeline.components.KafkaDeltaSource` component, in a `defs.yaml` or in Python
(docs/extending.md): the component builds its Dagster definitions from `SourceTopic.declared(...)`, and the
functions of the library that work on sources receive them. The project's own three sources, which its silver and
gold tables read, are declared in Python in `tables.py`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from streaming_pipeline.lakehouse.errors import ConfigurationError
from streaming_pipeline.lakehouse.expectations import Expectation, drop_rules, quarantine_columns
from streaming_pipeline.lakehouse.schemas import avro_columns, load_schema
from streaming_pipeline.lakehouse.table_model import BRONZE, KAFKA_COLUMNS, Column, Table

if TYPE_CHECKING:
    from collections.abc import Iterable, Sequence


#: `append`: a stream, every record a row; `upsert`: a table topic, the latest value per key.
SourceMode = Literal["append", "upsert"]
APPEND: SourceMode = "append"
UPSERT: SourceMode = "upsert"
#: The columns a table topic's history table adds to the key's and the value's.
HISTORY_COLUMNS = (
    Column(
        "valid_from",
        "timestamp",
        "When this version of the key became current (the Kafka timestamp, or a field of the value the source names).",
    ),
    Column(
        "valid_to",
        "timestamp",
        "When a later record of the key (a new value or a tombstone) replaced this version; null for the current one.",
    ),
    Column("is_current", "boolean", "True for the key's current version (false once replaced or deleted)."),
)


@dataclass(frozen=True)
class SourceTopic:
    """A Kafka topic of Avro records and the bronze table it lands in."""

    topic: str
    bronze_table: str
    #: The value's Avro schema: a file name in `schemas/`, or an absolute path (a component's `value_schema`).
    value_schema: str
    description: str
    #: The key's Avro schema, as `value_schema`; None when the topic's keys are not Avro (a stream's bronze table
    #: ignores keys; a table topic needs one).
    key_schema: str | None = None
    #: The value's field that is the record key (what `streaming-pipeline produce` sends as the key).
    key_field: str = ""
    #: `append`: a stream, every record a row. `upsert`: a table topic, one row per key (its latest value), a
    #: tombstone deleting the key's row; it needs `key_schema`, an Avro record whose fields are the key columns.
    mode: SourceMode = APPEND
    #: With `upsert`: every version of each key too, in `<table>_history` (SCD type 2).
    history: bool = False
    #: With `history`: the value's timestamp field a version is valid from (default the Kafka timestamp).
    valid_from_field: str = ""
    #: Rules on the decoded rows (a stream's): `warn` counts, `drop` sets rows aside in `quarantine_table`, `fail`
    #: fails the micro-batch (`lakehouse.expectations`).
    expectations: tuple[Expectation, ...] = ()
    #: The table of the rows its `drop` rules set aside; default `<bronze table>_quarantine`.
    quarantine_table: str = ""

    @classmethod
    def declared(
        cls,
        *,
        topic: str,
        value_schema: str,
        key_schema: str | None = None,
        key_field: str = "",
        table: str | None = None,
        description: str | None = None,
        mode: SourceMode = APPEND,
        history: bool = False,
        valid_from_field: str = "",
        expectations: Sequence[Expectation] = (),
        quarantine_table: str | None = None,
    ) -> SourceTopic:
        """A source from the fields of its declaration, with their defaults.

        Args:
            topic: the Kafka topic.
            value_schema: the value's Avro schema: a file name in `schemas/`, or an absolute path.
            key_schema: the key's Avro schema, likewise; None when the keys are not Avro.
            key_field: the value's field that is the record key (for producers that build keys).
            table: the bronze table; default `raw_<topic>`, characters that cannot be in a table name as '_'.
            description: the asset's description; default, one naming the topic.
            mode: `append` (a stream) or `upsert` (a table topic: the latest value per key).
            history: with `upsert`, every version of each key too, in `<table>_history`.
            valid_from_field: with `history`, the value's timestamp field a version is valid from.
            expectations: rules on the decoded rows (a stream's), each `warn`, `drop` or `fail`.
            quarantine_table: the table of the rows `drop` rules set aside (default `<table>_quarantine`).

        Returns:
            The source."""
        return cls(
            topic=topic,
            bronze_table=table or default_bronze_table(topic),
            value_schema=value_schema,
            key_schema=key_schema,
            key_field=key_field,
            description=description or _default_description(topic, mode),
            mode=mode,
            history=history,
            valid_from_field=valid_from_field,
            expectations=tuple(expectations),
            quarantine_table=quarantine_table or "",
        )

    @property
    def is_table_topic(self) -> bool:
        """True for a table topic (`mode: upsert`): one row per key, compaction's gaps normal."""
        return self.mode == UPSERT

    @property
    def cleanup_policy(self) -> str | None:
        """The `cleanup.policy` its topic is created with when absent: `compact` for a table topic (Kafka keeps the
        latest record of each key), the broker's default (`delete`) for a stream."""
        return "compact" if self.is_table_topic else None

    @property
    def key_columns(self) -> tuple[Column, ...]:
        """The key schema's fields (a table topic's key columns); () without a key schema."""
        return avro_columns(load_schema(self.key_schema), what="key") if self.key_schema else ()

    @property
    def table(self) -> Table:
        """The bronze table: the value schema's fields, then the Kafka coordinates; a table topic's starts with the
        key's fields."""
        value_columns = avro_columns(load_schema(self.value_schema))
        if not self.is_table_topic:
            return Table(self.bronze_table, BRONZE, (*value_columns, *KAFKA_COLUMNS))
        keys = self.key_columns
        names = {c.name for c in keys}
        return Table(
            self.bronze_table, BRONZE, (*keys, *[c for c in value_columns if c.name not in names], *KAFKA_COLUMNS)
        )

    @property
    def history_table(self) -> Table | None:
        """A table topic's history (`history`): every version of each key, with its validity; None without."""
        if not (self.is_table_topic and self.history):
            return None
        return Table(f"{self.bronze_table}_history", BRONZE, (*self.table.columns, *HISTORY_COLUMNS))

    @property
    def quarantine(self) -> Table | None:
        """The table of the rows its `drop` rules set aside (the row, the rules it broke, the micro-batch, when);
        None without drop rules."""
        if not drop_rules(self.expectations):
            return None
        name = self.quarantine_table or f"{self.bronze_table}_quarantine"
        return Table(name, BRONZE, (*self.table.columns, *quarantine_columns(self.bronze_table)))

    @property
    def tables(self) -> tuple[Table, ...]:
        """The tables this source's query writes besides the dead letters: its bronze table, its history and its
        quarantine."""
        return (self.table, *(t for t in (self.history_table, self.quarantine) if t is not None))

    @property
    def key_subject(self) -> str:
        """Topic name strategy, as Confluent's serializers use by default."""
        return f"{self.topic}-key"

    @property
    def value_subject(self) -> str:
        return f"{self.topic}-value"


def _default_description(topic: str, mode: SourceMode) -> str:
    if mode == UPSERT:
        return (
            f"The latest value of each key of the `{topic}` table topic (a tombstone deletes the key's row), decoded "
            "with its writer schema and resolved to the latest registered schema, with the Kafka coordinates of "
            "the record it comes from. Exactly once across re-runs and crashes."
        )
    return (
        f"Every record of the `{topic}` topic, decoded with its writer schema and resolved to the latest registered "
        "schema, with its Kafka coordinates. Exactly once across re-runs and crashes."
    )


def check_declared_once(sources: Iterable[SourceTopic]) -> None:
    """A ConfigurationError when two sources declare one topic or one bronze table."""
    sources = list(sources)
    for what, names in (("topic", [s.topic for s in sources]), ("bronze table", [s.bronze_table for s in sources])):
        twice = sorted({n for n in names if names.count(n) > 1})
        if twice:
            raise ConfigurationError(f"more than one source declares the {what} {', '.join(twice)}")


def source_for_topic(sources: Iterable[SourceTopic], topic: str) -> SourceTopic:
    """The source of `topic` among `sources`; a ConfigurationError naming the topics there are otherwise."""
    sources = list(sources)
    for source in sources:
        if source.topic == topic:
            return source
    raise ConfigurationError(f"unknown topic {topic!r}; choose one of {', '.join(s.topic for s in sources)}")


def default_bronze_table(topic: str) -> str:
    """A topic's bronze table when its declaration names none: `raw_<topic>`, characters that cannot be in a table
    name as '_'."""
    return "raw_" + re.sub(r"[^A-Za-z0-9_]", "_", topic)
