"""`KafkaDeltaSource`: one Kafka topic of Avro records (Confluent wire format) ingested exactly once into a bronze
Delta table, declared by a `defs.yaml` (or in Python, `KafkaDeltaSource.of`) in any `dg` project that has this
package installed.

The component turns its YAML into the library's plain declaration (`streaming_pipeline.sources.SourceTopic`) and
builds from it what the project builds for each of its own sources (`defs/bronze/sources.py`): the bronze asset
with its columns from the Avro `doc`s, its checks, its live job and offset sensor; with `resources:
from_environment`, the four resources too, configured from the same environment variables as the project
(docs/configuration.md), for a project whose definitions bind none. The project's first source
(by path) also builds the dead-letter table's asset, downstream of every source's bronze table: a project that
declares sources gets it without declaring anything more.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Annotated, Literal, Self

import dagster as dg
import fastavro
from pydantic import BaseModel, Field, PrivateAttr

from streaming_pipeline.errors import ConfigurationError
from streaming_pipeline.resources.from_settings import build_resources
from streaming_pipeline.schemas import avro_columns, load_schema
from streaming_pipeline.settings import LiveSettings, PipelineSettings, SensorSettings
from streaming_pipeline.sources import SourceTopic
from streaming_pipeline.streamed_table import fast_run_tables, streamed_tables

#: Kafka's legal topic names (kafka.common.internals.Topic): ASCII letters, digits, '.', '_', '-', at most 249.
_KAFKA_TOPIC = re.compile(r"^[a-zA-Z0-9._-]{1,249}$")
#: A table name that is a Dagster asset key, a Delta directory and a Spark SQL identifier without quoting.
_TABLE_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def _topic(context: dg.ResolutionContext, value: str) -> str:
    if not _KAFKA_TOPIC.match(value) or value in {".", ".."}:
        raise ConfigurationError(
            f"topic {value!r} is not a Kafka topic name: 1 to 249 ASCII letters, digits, '.', '_' or '-'"
        )
    return value


def _table(context: dg.ResolutionContext, value: str | None) -> str | None:
    if value is not None and not _TABLE_NAME.match(value):
        raise ConfigurationError(
            f"table {value!r} is not a table name: a letter or '_', then letters, digits or '_' (it names the "
            "asset, the Delta table's directory and the SQL view)"
        )
    return value


def _schema_file(context: dg.ResolutionContext, value: str, *, field: str) -> str:
    """The schema file's absolute path, after checking that it holds a valid Avro schema."""
    path = context.resolve_source_relative_path(value)
    if not path.is_file():
        raise ConfigurationError(f"{field} {value!r}: no such file {path} (a path relative to this defs.yaml)")
    try:
        fastavro.parse_schema(json.loads(path.read_text()))
    except (ValueError, TypeError, KeyError, fastavro.schema.SchemaParseException) as exc:
        raise ConfigurationError(f"{field} {value!r}: {path} is not a valid Avro schema: {exc}") from exc
    return str(path)


def _value_schema(context: dg.ResolutionContext, value: str) -> str:
    path = _schema_file(context, value, field="value_schema")
    try:
        avro_columns(Path(path).read_text())
    except ConfigurationError as exc:
        raise ConfigurationError(f"value_schema {value!r}: {exc}") from exc
    return path


def _key_schema(context: dg.ResolutionContext, value: str | None) -> str | None:
    return None if value is None else _schema_file(context, value, field="key_schema")


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
        _topic(dg.ResolutionContext.default(), topic)
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


@dg.scaffold_with(KafkaDeltaSourceScaffolder)
class KafkaDeltaSource(dg.Component, dg.Model, dg.Resolvable):
    """A Kafka topic of Avro records ingested exactly once into a bronze Delta table, with dead letters for the
    records that cannot be decoded, reconciliation checks, an offset sensor and a live job."""

    topic: Annotated[
        str, dg.Resolver(_topic, model_field_type=str, description="The Kafka topic.", examples=["orders"])
    ]
    value_schema: Annotated[
        str,
        dg.Resolver(
            _value_schema,
            model_field_type=str,
            description="The value's Avro record schema (.avsc), relative to this defs.yaml. Its fields, with "
            "their `doc`s, are the bronze table's columns; records are decoded with their writer schema and "
            "resolved to the latest one registered for `<topic>-value`.",
            examples=["order_value.avsc"],
        ),
    ]
    key_schema: Annotated[
        str | None,
        dg.Resolver(
            _key_schema,
            model_field_type=str | None,
            description="The key's Avro schema (.avsc), relative to this defs.yaml. Optional: bronze keeps the "
            "value and the Kafka coordinates, not the key.",
            examples=["order_key.avsc"],
        ),
    ] = None
    key_field: str = Field(
        default="", description="The value's field that is the record key, for producers that build keys."
    )
    table: Annotated[
        str | None,
        dg.Resolver(
            _table,
            model_field_type=str | None,
            description="The bronze Delta table and asset (default `raw_<topic>`).",
            examples=["raw_orders"],
        ),
    ] = None
    description: str | None = Field(default=None, description="The asset's description in the Dagster UI.")
    resources: Literal["from_environment"] | None = Field(
        default=None,
        description="`from_environment`: this source binds the four resources its assets use (kafka, "
        "schema_registry, spark, lakehouse), configured from the pipeline's environment variables, for a project "
        "whose definitions bind none. One source of a project sets it; leave it out when the project's "
        "definitions bind the resources.",
    )

    #: Where this instance is declared (its defs folder), for errors that name it; set by `load`.
    _declared_at: Path | None = PrivateAttr(default=None)

    @classmethod
    def load(cls, attributes: BaseModel | None, context: dg.ComponentLoadContext) -> Self:
        component = super().load(attributes, context)
        component._declared_at = context.path
        return component

    @classmethod
    def of(
        cls,
        source: SourceTopic,
        context: dg.ComponentLoadContext,
        resources: Literal["from_environment"] | None = None,
    ) -> Self:
        """The component of a source declared in Python, for a `@dg.component_instance` function in a module of the
        defs folder.

        Args:
            source: the declaration (schema paths absolute, or file names of this package's `schemas/`).
            context: the load context Dagster passes the function.
            resources: as the YAML attribute: `from_environment` binds the resources.

        Returns:
            The component, as its YAML would load."""
        component = cls(
            topic=source.topic,
            value_schema=source.value_schema,
            key_schema=source.key_schema,
            key_field=source.key_field,
            table=source.bronze_table,
            description=source.description,
            resources=resources,
        )
        component._declared_at = context.path
        return component

    @property
    def source(self) -> SourceTopic:
        """The library's declaration of this source (plain Python, what the foreachBatch handlers receive)."""
        return SourceTopic.declared(
            topic=self.topic,
            value_schema=self.value_schema,
            key_schema=self.key_schema,
            key_field=self.key_field,
            table=self.table,
            description=self.description,
        )

    def build_defs(self, context: dg.ComponentLoadContext) -> dg.Definitions:
        from streaming_pipeline.defs.bronze.sources import dead_letter_asset, source_definitions  # shared wiring

        _check_declared_once(self, context)
        _check_key_field(self, context)
        _check_resources_bound_once(self, context)
        tree, live = context.component_tree, LiveSettings.from_env()
        fast_run = fast_run_tables(self.source.bronze_table, streamed_tables(tree))
        components = _in_path_order(tree)
        # One dead-letter table for every source of the project: its asset comes with the first one.
        dead_letters = [dead_letter_asset([c.source for c in components], live)] if components[0] is self else []
        bound = dict(build_resources(PipelineSettings.from_env())) if self.resources == "from_environment" else {}
        return dg.Definitions.merge(
            source_definitions(self.source, SensorSettings.from_env(), live, fast_run),
            dg.Definitions(assets=dead_letters, resources=bound),
        )


def _declaration_file(context: dg.ComponentLoadContext) -> Path:
    """The file that declares the component: its defs.yaml, or the Python module of a `@dg.component_instance`."""
    return context.path if context.path.suffix == ".py" else context.path / "defs.yaml"


def _check_key_field(component: KafkaDeltaSource, context: dg.ComponentLoadContext) -> None:
    """A ConfigurationError naming the declaration when `key_field` is not a field of the value schema."""
    if not component.key_field:
        return
    fields = [column.name for column in avro_columns(load_schema(component.value_schema))]
    if component.key_field not in fields:
        raise ConfigurationError(
            f"{_declaration_file(context)}: key_field {component.key_field!r} is not a field of the value schema "
            f"{component.value_schema} (its fields: {', '.join(fields)})"
        )


def _check_declared_once(component: KafkaDeltaSource, context: dg.ComponentLoadContext) -> None:
    """A ConfigurationError naming the declaration when another KafkaDeltaSource of the project declares its topic
    or its table."""
    others = [c for c in context.component_tree.get_all_components(of_type=KafkaDeltaSource) if c is not component]
    for field, value_of in (("topic", lambda c: c.topic), ("table", lambda c: c.source.bronze_table)):
        value = value_of(component)
        twice = sorted(str(c._declared_at) for c in others if value_of(c) == value)
        if twice:
            raise ConfigurationError(
                f"{_declaration_file(context)}: {field} {value!r} is declared by another KafkaDeltaSource too "
                f"({', '.join(twice)}); each topic and each table has one source"
            )


def _check_resources_bound_once(component: KafkaDeltaSource, context: dg.ComponentLoadContext) -> None:
    """A ConfigurationError naming the declarations when more than one source of the project binds the resources."""
    binding = [c for c in _in_path_order(context.component_tree) if c.resources is not None]
    if component.resources is not None and len(binding) > 1:
        raise ConfigurationError(
            f"{_declaration_file(context)}: `resources: from_environment` is set by more than one KafkaDeltaSource "
            f"({', '.join(str(c._declared_at) for c in binding)}); the resources are bound once: keep it on one "
            "source and delete it from the others"
        )


def _in_path_order(tree: dg.ComponentTree) -> list[KafkaDeltaSource]:
    return sorted(tree.get_all_components(of_type=KafkaDeltaSource), key=lambda c: str(c._declared_at))


def declared_sources(tree: dg.ComponentTree) -> tuple[SourceTopic, ...]:
    """Every source the project declares (its `KafkaDeltaSource` instances), in the order of their paths."""
    return tuple(c.source for c in _in_path_order(tree))
