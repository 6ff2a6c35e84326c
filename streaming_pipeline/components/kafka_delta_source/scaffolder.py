"""`dg scaffold defs streaming_pipeline.components.KafkaDeltaSource <path>`: what it writes."""

from __future__ import annotations

import json

import dagster as dg
from pydantic import Field

from streaming_pipeline.components.kafka_delta_source.fields import topic_name


class KafkaDeltaSourceScaffoldParams(dg.Model):
    topic: str | None = Field(default=None, description="The Kafka topic (default: the folder's name).")


class KafkaDeltaSourceScaffolder(dg.Scaffolder[KafkaDeltaSourceScaffoldParams]):
    """`dg scaffold defs streaming_pipeline.components.KafkaDeltaSource <path>`: a `defs.yaml` with every field
    (the optional ones commented out) and an example value schema beside it, to replace with the topic's own."""

    @classmethod
    def get_scaffold_params(cls) -> type[KafkaDeltaSourceScaffoldParams]:
        return KafkaDeltaSourceScaffoldParams

    def scaffold(self, request: dg.ScaffoldRequest[KafkaDeltaSourceScaffoldParams]) -> None:
        topic = request.params.topic or request.target_path.name
        topic_name(dg.ResolutionContext.default(), topic)
        request.target_path.mkdir(parents=True, exist_ok=True)
        (request.target_path / "defs.yaml").write_text(_SCAFFOLD_YAML.format(type_name=request.type_name, topic=topic))
        (request.target_path / "value.avsc").write_text(_SCAFFOLD_SCHEMA)


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
  # This source binds the resources its assets use (kafka, schema_registry, spark, lakehouse), configured from the
  # environment variables. One source of the project binds them: delete this line on the others, and on every
  # source when your definitions bind the resources themselves.
  resources: from_environment
"""

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
