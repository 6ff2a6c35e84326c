"""`KafkaDeltaSource`: one Kafka topic of Avro records (Confluent wire format) ingested exactly once into a bronze
Delta table, declared by a `defs.yaml` (or in Python, `KafkaDeltaSource.of`) in any `dg` project that has this
package installed.

The component turns its YAML into the library's plain declaration
(`streaming_pipeline.lakehouse.sources.SourceTopic`) and builds from it, with the modules beside it: the bronze
asset with its columns from the Avro `doc`s, its checks, its live job and offset sensor; with `resources:
from_environment`, the four resources too, configured from the same environment variables as the project
(docs/configuration.md), for a project whose definitions bind none. The project's first source (by path) also
builds the dead-letter table's asset, downstream of every source's bronze table: a project that declares sources
gets it without declaring anything more, and so does the continuous mode's job and sensor
(`components.continuous`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Literal, Self

import dagster as dg
from pydantic import BaseModel, Field, PrivateAttr

from streaming_pipeline.components.continuous import continuous_definitions
from streaming_pipeline.components.expectation_checks import ExpectationAttributes
from streaming_pipeline.components.kafka_delta_source.assets import dead_letter_asset, source_definitions
from streaming_pipeline.components.kafka_delta_source.fields import (
    key_schema_file,
    table_name,
    topic_name,
    value_schema_file,
)
from streaming_pipeline.components.kafka_delta_source.scaffolder import KafkaDeltaSourceScaffolder
from streaming_pipeline.components.maintenance import maintenance_definitions
from streaming_pipeline.components.streamed_table import fast_run_tables, streamed_tables
from streaming_pipeline.lakehouse.errors import ConfigurationError
from streaming_pipeline.lakehouse.expectations import check_expectations
from streaming_pipeline.lakehouse.schemas import avro_columns, load_schema
from streaming_pipeline.lakehouse.settings import LiveSettings, MaintenanceSettings, PipelineSettings, SensorSettings
from streaming_pipeline.lakehouse.sources import SourceTopic
from streaming_pipeline.resources.from_settings import build_resources


@dg.scaffold_with(KafkaDeltaSourceScaffolder)
class KafkaDeltaSource(dg.Component, dg.Model, dg.Resolvable):
    """A Kafka topic of Avro records ingested exactly once into a bronze Delta table, with dead letters for the
    records that cannot be decoded, reconciliation checks, an offset sensor and a live job."""

    topic: Annotated[
        str, dg.Resolver(topic_name, model_field_type=str, description="The Kafka topic.", examples=["orders"])
    ]
    value_schema: Annotated[
        str,
        dg.Resolver(
            value_schema_file,
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
            key_schema_file,
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
            table_name,
            model_field_type=str | None,
            description="The bronze Delta table and asset (default `raw_<topic>`).",
            examples=["raw_orders"],
        ),
    ] = None
    description: str | None = Field(default=None, description="The asset's description in the Dagster UI.")
    mode: Literal["append", "upsert"] = Field(
        default="append",
        description="`append`: a stream, every record a row. `upsert`: a table topic (the latest value per key, a "
        "KTable): one row per key, replaced by a record of a higher offset (MERGE), deleted by a tombstone (a null "
        "value); needs `key_schema`, an Avro record whose fields are the key columns. Suits a compacted topic "
        "(`cleanup.policy=compact`): its gaps are no alarm.",
    )
    history: bool = Field(
        default=False,
        description="With `mode: upsert`: every version of each key too, in `<table>_history` (SCD type 2: "
        "`valid_from`, `valid_to`, `is_current`; a tombstone closes the key's last version).",
    )
    valid_from_field: str = Field(
        default="",
        description="With `history`: the value's timestamp field a version is valid from (default: the record's "
        "Kafka timestamp).",
    )
    expectations: list[ExpectationAttributes] = Field(
        default_factory=list,
        description="Rules on the decoded rows of a stream (`mode: append`), as Lakeflow's expectations: each a name, "
        "a Spark SQL boolean expression over the row (`expect`) and `on_violation`: `warn` (written and counted), "
        "`drop` (set aside in the quarantine table) or `fail` (the micro-batch fails before anything of it is "
        "written). Each rule is an asset check of the table.",
    )
    quarantine_table: str | None = Field(
        default=None,
        description="The table of the rows the `drop` rules set aside: the row, the rules it broke, the micro-batch "
        "and when (default `<table>_quarantine`).",
    )
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
            mode=source.mode,
            history=source.history,
            valid_from_field=source.valid_from_field,
            expectations=[
                ExpectationAttributes(name=r.name, expect=r.constraint, on_violation=r.on_violation)
                for r in source.expectations
            ],
            quarantine_table=source.quarantine_table or None,
            resources=resources,
        )
        component._declared_at = context.path
        return component

    @property
    def declared_at(self) -> Path | None:
        """Where this instance is declared: its defs folder, or the Python module of a `@dg.component_instance`."""
        return self._declared_at

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
            mode=self.mode,
            history=self.history,
            valid_from_field=self.valid_from_field,
            expectations=[e.rule() for e in self.expectations],
            quarantine_table=self.quarantine_table,
        )

    def build_defs(self, context: dg.ComponentLoadContext) -> dg.Definitions:
        _check_declared_once(self, context)
        _check_key_field(self, context)
        _check_table_topic(self, context)
        _check_expectations(self, context)
        _check_resources_bound_once(self, context)
        tree, live = context.component_tree, LiveSettings.from_env()
        # A table topic's history is written by the same run as its table (one multi-asset).
        fast_run = [
            *fast_run_tables(self.source.bronze_table, streamed_tables(tree)),
            *(table.name for table in self.source.tables[1:]),
        ]
        components = _in_path_order(tree)
        bound = dict(build_resources(PipelineSettings.from_env())) if self.resources == "from_environment" else {}
        own = dg.Definitions.merge(
            source_definitions(self.source, SensorSettings.from_env(), live, fast_run, streamed_tables(tree)),
            dg.Definitions(resources=bound),
        )
        if components[0] is not self:
            return own
        # What the project has once, whatever its sources: it comes with the first one. The dead-letter table of
        # every source, and the continuous mode and the table maintenance of every source and streaming table.
        sources, steps = [c.source for c in components], streamed_tables(tree)
        return dg.Definitions.merge(
            own,
            dg.Definitions(assets=[dead_letter_asset(sources, live)]),
            continuous_definitions(sources, steps),
            maintenance_definitions(sources, steps, MaintenanceSettings.from_env()),
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


def _check_table_topic(component: KafkaDeltaSource, context: dg.ComponentLoadContext) -> None:
    """A ConfigurationError naming the declaration when the table-topic fields do not fit together: `upsert` without
    a record key schema, `history` without `upsert`, a `valid_from_field` that is no timestamp field of the value."""
    where = _declaration_file(context)
    if component.mode != "upsert":
        if component.history or component.valid_from_field:
            raise ConfigurationError(
                f"{where}: `history` and `valid_from_field` are for a table topic; set `mode: upsert` (or delete them)"
            )
        return
    if component.key_schema is None:
        raise ConfigurationError(
            f"{where}: `mode: upsert` keeps one row per key: set `key_schema`, an Avro record schema whose fields are "
            "the key columns"
        )
    try:
        avro_columns(load_schema(component.key_schema), what="key")
    except ConfigurationError as exc:
        raise ConfigurationError(f"{where}: key_schema {component.key_schema}: {exc}") from exc
    if component.valid_from_field:
        if not component.history:
            raise ConfigurationError(f"{where}: `valid_from_field` is for the history table: set `history: true`")
        columns = {c.name: c.type for c in avro_columns(load_schema(component.value_schema))}
        if columns.get(component.valid_from_field) != "timestamp":
            timestamps = [name for name, kind in columns.items() if kind == "timestamp"] or ["none"]
            raise ConfigurationError(
                f"{where}: valid_from_field {component.valid_from_field!r} is not a timestamp field of the value "
                f"schema {component.value_schema} (its timestamp fields: {', '.join(timestamps)})"
            )


def _check_expectations(component: KafkaDeltaSource, context: dg.ComponentLoadContext) -> None:
    """A ConfigurationError naming the declaration for rules that cannot be the source's (`check_expectations`:
    two of one name, not a condition over the bronze table's columns), rules on a table topic, or a
    `quarantine_table` without a `drop` rule."""
    where, source = _declaration_file(context), component.source
    if component.mode == "upsert" and source.expectations:
        raise ConfigurationError(
            f"{where}: `expectations` check the rows of a stream (`mode: append`); a table topic's are not checked "
            "yet: declare them on a streaming table that reads it"
        )
    try:
        check_expectations(source.expectations, source.table.column_names)
    except ConfigurationError as exc:
        raise ConfigurationError(f"{where}: {exc}") from None
    if component.quarantine_table is not None and source.quarantine is None:
        raise ConfigurationError(
            f"{where}: `quarantine_table` takes the rows that `drop` rules set aside, and this source has none"
        )


def _check_declared_once(component: KafkaDeltaSource, context: dg.ComponentLoadContext) -> None:
    """A ConfigurationError naming the declaration when another KafkaDeltaSource of the project declares its topic
    or its table."""
    others = [c for c in context.component_tree.get_all_components(of_type=KafkaDeltaSource) if c is not component]
    for field, value_of in (("topic", lambda c: c.topic), ("table", lambda c: c.source.bronze_table)):
        value = value_of(component)
        twice = sorted(str(c.declared_at) for c in others if value_of(c) == value)
        if twice:
            raise ConfigurationError(
                f"{_declaration_file(context)}: {field} {value!r} is declared by another KafkaDeltaSource too "
                f"({', '.join(twice)}); each topic and each table has one source"
            )


def _check_resources_bound_once(component: KafkaDeltaSource, context: dg.ComponentLoadContext) -> None:
    """A ConfigurationError naming the declarations when more than one source of the project binds the resources."""
    binding = sources_binding_resources(context.component_tree)
    if component.resources is not None and len(binding) > 1:
        raise ConfigurationError(
            f"{_declaration_file(context)}: `resources: from_environment` is set by more than one KafkaDeltaSource "
            f"({', '.join(str(c.declared_at) for c in binding)}); the resources are bound once: keep it on one "
            "source and delete it from the others"
        )


def sources_binding_resources(tree: dg.ComponentTree) -> list[KafkaDeltaSource]:
    """The project's sources that bind the resources (`resources: from_environment`), in the order of their paths."""
    return [c for c in _in_path_order(tree) if c.resources is not None]


def _in_path_order(tree: dg.ComponentTree) -> list[KafkaDeltaSource]:
    return sorted(tree.get_all_components(of_type=KafkaDeltaSource), key=lambda c: str(c.declared_at))


def declared_sources(tree: dg.ComponentTree) -> tuple[SourceTopic, ...]:
    """Every source the project declares (its `KafkaDeltaSource` instances), in the order of their paths."""
    return tuple(c.source for c in _in_path_order(tree))
