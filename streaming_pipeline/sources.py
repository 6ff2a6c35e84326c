"""A source: a Kafka topic of Avro records (key and value in the Confluent wire format) and the bronze table it lands
in. Plain Python: the foreachBatch handlers and the command line read it without Dagster.

A source is declared by a `defs.yaml` of type `streaming_pipeline.components.KafkaDeltaSource` (docs/extending.md):
the component builds its Dagster definitions from `SourceTopic.declared(...)`, and the functions of the library
that work on sources receive them. `read_declaration` reads such a file without Dagster, for the project's own
sources that its silver and gold tables read (`tables.py`) and for the command line (`project_sources`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from streaming_pipeline.errors import ConfigurationError
from streaming_pipeline.schemas import avro_columns, load_schema

if TYPE_CHECKING:
    from collections.abc import Iterable

    from streaming_pipeline.tables import Table

#: The `type` of a source's defs.yaml.
COMPONENT_TYPE = "streaming_pipeline.components.KafkaDeltaSource"


@dataclass(frozen=True)
class SourceTopic:
    """A Kafka topic of Avro records and the bronze table it lands in."""

    topic: str
    bronze_table: str
    #: The value's Avro schema: a file name in `schemas/`, or an absolute path (a component's `value_schema`).
    value_schema: str
    description: str
    #: The key's Avro schema, as `value_schema`; None when the topic's keys are not Avro (bronze ignores keys).
    key_schema: str | None = None
    #: The value's field that is the record key (what `streaming-pipeline produce` sends as the key).
    key_field: str = ""

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
    ) -> SourceTopic:
        """A source from the fields of its declaration, with their defaults: the table `raw_<topic>` (characters
        that cannot be in a table name as '_'), a description naming the topic."""
        return cls(
            topic=topic,
            bronze_table=table or "raw_" + re.sub(r"[^A-Za-z0-9_]", "_", topic),
            value_schema=value_schema,
            key_schema=key_schema,
            key_field=key_field,
            description=description
            or f"Every record of the `{topic}` topic, decoded with its writer schema and resolved to the latest "
            "registered schema, with its Kafka coordinates. Exactly once across re-runs and crashes.",
        )

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


def read_declaration(defs_yaml: Path) -> SourceTopic:
    """The source a `KafkaDeltaSource` defs.yaml declares, read without Dagster: its attributes as written (no
    templates), the schema paths relative to the file. Dagster's own loading of the same file validates it fully."""
    document: Any = yaml.safe_load(defs_yaml.read_text())
    if not isinstance(document, dict) or document.get("type") != COMPONENT_TYPE:
        raise ConfigurationError(f"{defs_yaml}: not a {COMPONENT_TYPE} declaration")
    attributes = dict(document.get("attributes") or {})
    for field in ("value_schema", "key_schema"):
        if attributes.get(field) is not None:
            attributes[field] = str((defs_yaml.parent / attributes[field]).resolve())
    try:
        return SourceTopic.declared(**attributes)
    except TypeError as exc:
        raise ConfigurationError(f"{defs_yaml}: {exc}") from exc


def project_defs_yaml(*parts: str) -> Path:
    """A defs.yaml of this project's code location (`streaming_pipeline/defs/<parts>/defs.yaml`)."""
    return Path(str(resources.files("streaming_pipeline").joinpath("defs", *parts, "defs.yaml")))


def project_sources() -> tuple[SourceTopic, ...]:
    """The sources declared in this project's code location, in path order (what the command line works on)."""
    root = project_defs_yaml().parent
    found = [
        read_declaration(path)
        for path in sorted(root.rglob("defs.yaml"))
        if (yaml.safe_load(path.read_text()) or {}).get("type") == COMPONENT_TYPE
    ]
    check_declared_once(found)
    return tuple(found)


def check_declared_once(sources: Iterable[SourceTopic]) -> None:
    """A ConfigurationError when two sources declare one topic or one bronze table."""
    sources = list(sources)
    for what, names in (("topic", [s.topic for s in sources]), ("bronze table", [s.bronze_table for s in sources])):
        twice = sorted({n for n in names if names.count(n) > 1})
        if twice:
            raise ConfigurationError(f"more than one source declares the {what} {', '.join(twice)}")


def source_for_topic(sources: Iterable[SourceTopic], topic: str) -> SourceTopic:
    sources = list(sources)
    for source in sources:
        if source.topic == topic:
            return source
    raise ConfigurationError(f"unknown topic {topic!r}; choose one of {', '.join(s.topic for s in sources)}")
