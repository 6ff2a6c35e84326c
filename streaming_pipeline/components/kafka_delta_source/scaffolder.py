"""`dg scaffold defs streaming_pipeline.components.KafkaDeltaSource <path>`: what it writes."""

from __future__ import annotations

import json
from typing import Literal

import dagster as dg
from pydantic import Field

from streaming_pipeline.components.kafka_delta_source.fields import topic_name
from streaming_pipeline.components.project_resources import write_resources_module


class KafkaDeltaSourceScaffoldParams(dg.Model):
    topic: str | None = Field(default=None, description="The Kafka topic (default: the folder's name).")
    mode: Literal["append", "upsert"] = Field(
        default="append",
        description="`upsert` scaffolds a table topic: the latest value per key, with an example key schema.",
    )


class KafkaDeltaSourceScaffolder(dg.Scaffolder[KafkaDeltaSourceScaffoldParams]):
    """`dg scaffold defs streaming_pipeline.components.KafkaDeltaSource <path>`: a `defs.yaml` with every field
    (the optional ones commented out) and an example value schema beside it, to replace with the topic's own. The
    first scaffold of a project also writes its `resources.py` (`project_resources`)."""

    @classmethod
    def get_scaffold_params(cls) -> type[KafkaDeltaSourceScaffoldParams]:
        return KafkaDeltaSourceScaffoldParams

    def scaffold(self, request: dg.ScaffoldRequest[KafkaDeltaSourceScaffoldParams]) -> None:
        topic = request.params.topic or request.target_path.name
        topic_name(dg.ResolutionContext.default(), topic)
        request.target_path.mkdir(parents=True, exist_ok=True)
        table_topic = request.params.mode == "upsert"
        template = _SCAFFOLD_TABLE_TOPIC_YAML if table_topic else _SCAFFOLD_YAML
        (request.target_path / "defs.yaml").write_text(template.format(type_name=request.type_name, topic=topic))
        (request.target_path / "value.avsc").write_text(_SCAFFOLD_SCHEMA)
        if table_topic:
            (request.target_path / "key.avsc").write_text(_SCAFFOLD_KEY_SCHEMA)
        write_resources_module(request.target_path)


_SCAFFOLD_YAML = """\
# One Kafka topic ingested exactly once into a bronze Delta table.
type: {type_name}
attributes:
  topic: {topic}
  # The value's Avro record schema, relative to this file: its fields (with their `doc`s) are the table's columns.
  value_schema: value.avsc
  # Optional: the key's Avro schema (bronze keeps the value and the Kafka coordinates, not the key).
  # key_schema: key.avsc
  # Optional: the bronze table and asset (default raw_<topic>, non-identifier characters as '_').
  # table: raw_{topic}
  # Optional: the asset's description in the Dagster UI.
  # description: Every record of the {topic} topic.
"""

_SCAFFOLD_TABLE_TOPIC_YAML = """\
# One table topic (keyed, best compacted) kept exactly once as a Delta table of the latest value per key.
type: {type_name}
attributes:
  topic: {topic}
  # A table topic: one row per key (the record of the highest offset), a tombstone (null value) deletes the key's row.
  mode: upsert
  # The key's Avro record schema, relative to this file: its fields are the table's key columns.
  key_schema: key.avsc
  # The value's Avro record schema: its fields (with their `doc`s) are the table's other columns.
  value_schema: value.avsc
  # Optional: every version of each key too, in <table>_history (valid_from, valid_to, is_current).
  # history: true
  # Optional, with history: the value's timestamp field a version is valid from (default the Kafka timestamp).
  # valid_from_field: created_at
  # Optional: the table and asset (default raw_<topic>, non-identifier characters as '_').
  # table: {topic}
  # Optional: the asset's description in the Dagster UI.
  # description: The latest value of each key of the {topic} topic.
"""

#: A table topic's example key: a record whose fields are the key columns.
_SCAFFOLD_KEY_SCHEMA = (
    json.dumps(
        {
            "type": "record",
            "name": "Key",
            "namespace": "example",
            "doc": "An example key schema: replace it with your topic's own. Its fields are the table's key columns.",
            "fields": [{"name": "id", "type": "long", "doc": "The example key field (the value's id)."}],
        },
        indent=2,
    )
    + "\n"
)

#: Avro has no comments: the example explains itself in `doc`s, which become the columns' descriptions.
_SCAFFOLD_SCHEMA = (
    json.dumps(
        {
            "type": "record",
            "name": "Value",
            "namespace": "example",
            "doc": "An example value schema: replace it with your topic's own. Each field is a column of the bronze "
            "table; its doc is the column's description. A field added later needs a default, so that the "
            "registry accepts the new version as backward compatible.",
            "fields": [
                {"name": "id", "type": "long", "doc": "An example key field."},
                {"name": "amount", "type": ["null", "double"], "default": None, "doc": "An optional number."},
                {
                    "name": "created_at",
                    "type": {"type": "long", "logicalType": "timestamp-micros"},
                    "doc": "A timestamp (UTC).",
                },
            ],
        },
        indent=2,
    )
    + "\n"
)
