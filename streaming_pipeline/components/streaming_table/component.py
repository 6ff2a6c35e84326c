"""`StreamingTable`: a silver or gold Delta table streamed from other tables of the lakehouse, declared in any `dg`
project by a `defs.yaml` with its SQL, or in Python by a function (`streaming_table`).

    type: streaming_pipeline.components.StreamingTable
    attributes:
      name: large_orders
      sql: SELECT * FROM STREAM(raw_orders) WHERE total > ${min_total}
      parameters:
        min_total: {default: "100", env: LARGE_ORDER_MIN_TOTAL}

What the table reads comes from its SQL (`STREAM(t)` streams `t`, any other table is read as it is at each
micro-batch): its asset's deps, the skip while a source is missing, the continuous run's wait. The component turns
its YAML into the library's declaration (`lakehouse.streaming_tables.StreamingTableQuery`) and builds its step
(`streamed_table.StreamedTable`): the asset with its group, owners, catalog name and column docs, its config (the
SQL's parameters, their defaults from the environment), its triggered runs, and its place in the continuous run,
the fast runs and table maintenance.
"""

from __future__ import annotations

import functools
import inspect
import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, ClassVar, Literal, Self

import dagster as dg
import pydantic
from pydantic import BaseModel, Field, PrivateAttr

from streaming_pipeline.components.asset_metadata import delta_table_metadata, stream_metadata
from streaming_pipeline.components.expectation_checks import (
    ExpectationAttributes,
    expectation_checks,
    expectation_metadata,
)
from streaming_pipeline.components.parameters import parameter, parameters_of
from streaming_pipeline.components.streamed_table import (
    DeclaresStreamedTable,
    QueryInputs,
    StepRun,
    StreamedTable,
    WrittenTable,
    declared_tables,
    streamed_tables,
)
from streaming_pipeline.components.streaming_table.checks import not_behind_sources_check
from streaming_pipeline.components.streaming_table.scaffolder import StreamingTableScaffolder
from streaming_pipeline.lakehouse.engine.delta_tables import sum_columns
from streaming_pipeline.lakehouse.errors import ConfigurationError
from streaming_pipeline.lakehouse.expectations import (
    BATCH_ID,
    QUARANTINED_AT,
    RULES_BROKEN,
    Expectation,
    check_expectations,
    counts_of,
    drop_rules,
    quarantine_columns,
)
from streaming_pipeline.lakehouse.late_rows import LATE_ROWS_COLUMNS, late_rows_of
from streaming_pipeline.lakehouse.settings import interval_seconds, normalize_interval
from streaming_pipeline.lakehouse.sources import SourceTopic
from streaming_pipeline.lakehouse.streaming_sql import StreamingSql, parameters_in, read_sql, substitute
from streaming_pipeline.lakehouse.streaming_tables import (
    AfterRun,
    ForeachBatch,
    SqlTransformation,
    StreamingTableQuery,
    TableTarget,
    Transformation,
    Watermark,
)
from streaming_pipeline.lakehouse.table_model import Column, Table

_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")

#: A Python table's metadata of a triggered run: from its target and what its `after_run` returned.
RunMetadata = Callable[[TableTarget, Any], Mapping[str, Any]]


class WatermarkAttributes(dg.Model):
    column: str = Field(description="The streamed table's event-time column.")
    delay: str = Field(
        description="How late a row may arrive, a Spark interval ('10 minutes') or a parameter ('${delay}')."
    )


class ColumnAttributes(dg.Model):
    type: str | None = Field(
        default=None,
        description="Its Spark SQL type (`bigint`, `string`, `timestamp`, ...): declare the type of every column "
        "or of none.",
    )
    description: str | None = Field(default=None, description="What the column holds.")


class ParameterAttributes(dg.Model):
    default: str | int | float = Field(description="The value without the environment variable, as the SQL takes it.")
    type: Literal["text", "number", "interval"] = Field(
        default="text",
        description="The config field's type, and how the environment variable is read: `text` as written, "
        "`number` a float, `interval` a Spark interval ('10 minutes').",
    )
    env: str | None = Field(
        default=None, description="The environment variable that sets it (default: its name, upper)."
    )
    description: str = Field(default="", description="What the parameter does.")


@dg.scaffold_with(StreamingTableScaffolder)
class StreamingTable(DeclaresStreamedTable, dg.Component, dg.Model, dg.Resolvable):
    """A Delta table streamed from other tables of the lakehouse by a Spark SQL query, exactly once, in a shape:
    `append`, `complete` or `upsert` by `keys`."""

    name: str = Field(description="The table and its asset.", examples=["large_orders"])
    sql: str = Field(
        default="",
        description="A Spark SQL query over the lakehouse's tables by asset name. `STREAM(t)` reads `t` as a stream "
        "(only its new rows); any other table is read as it is at each micro-batch (a stream-static join). "
        "`${name}` is a parameter.",
        examples=["SELECT * FROM STREAM(raw_orders) WHERE total > ${min_total}"],
    )
    mode: Literal["append", "complete", "upsert"] = Field(
        default="append",
        description="`append`: rows as they come (an aggregation needs a watermark, and emits a group once it "
        "passes); `complete`: an aggregate small enough to rewrite at each micro-batch; `upsert`: the rows each "
        "micro-batch changes merged by `keys` (one row per key).",
    )
    keys: list[str] = Field(default_factory=list, description="With `upsert`: the columns that identify a row.")
    sequence_by: str | None = Field(
        default=None,
        description="With `upsert`: the column that orders a key's rows (a version, a timestamp); the row with its "
        "highest value is kept, and a row older than the table's changes nothing.",
    )
    watermarks: dict[str, WatermarkAttributes] = Field(
        default_factory=dict,
        description="Per streamed table: its event-time column and how late its rows may be (windows, "
        "aggregations in append mode, stream-stream joins).",
    )
    parameters: dict[str, ParameterAttributes] = Field(
        default_factory=dict, description="The SQL's `${name}` parameters: run config, defaults from the environment."
    )
    group: str = Field(default="silver", description="The asset group and the table's catalog schema.")
    description: str | None = Field(default=None, description="The asset's description in the Dagster UI.")
    columns: dict[str, str | ColumnAttributes] = Field(
        default_factory=dict,
        description="By column name: its description, or `{type, description}`. With the type of every column "
        "the table's schema is declared: the UI shows it before the first run, and a column the query adds later "
        "is marked as added by schema evolution.",
    )
    owners: list[str] = Field(default_factory=list, description="The asset's owners (`team:...`, an e-mail).")
    latency_critical: bool = Field(
        default=False,
        description="In continuous mode it triggers as often as the bronze tables it reads, and a triggered run of "
        "the one bronze table it reads writes it too.",
    )
    priority: int = Field(default=0, description="Its place among the ready steps of a run (higher first).")
    late_rows_table: str | None = Field(
        default=None,
        description="With `watermarks`: a table of its own, written by its query, with one row per micro-batch whose "
        "watermark dropped rows (too late to be joined or counted) and how many, so that they are counted, not lost "
        "silently.",
    )
    expectations: list[ExpectationAttributes] = Field(
        default_factory=list,
        description="Rules on the table's rows, each a name, a Spark SQL boolean expression and what a violation "
        "does (`warn`, `drop`, `fail`), as Lakeflow's expectations; each is an asset check with a run's counts.",
    )
    quarantine_table: str | None = Field(
        default=None,
        description="With `drop` rules: the table of the rows they drop, as they were, with the rules each broke "
        "(default: `<name>_quarantine`).",
    )

    _transformation: Transformation | None = PrivateAttr(default=None)
    _foreach_batch: ForeachBatch | None = PrivateAttr(default=None)
    _after_run: AfterRun | None = PrivateAttr(default=None)
    _metadata: RunMetadata | None = PrivateAttr(default=None)
    _reads: tuple[tuple[str, ...], tuple[str, ...]] | None = PrivateAttr(default=None)
    _sql: StreamingSql | None = PrivateAttr(default=None)
    _declared_at: Path | None = PrivateAttr(default=None)
    _step: StreamedTable | None = PrivateAttr(default=None)

    @classmethod
    def load(cls, attributes: BaseModel | None, context: dg.ComponentLoadContext) -> Self:
        component = super().load(attributes, context)
        component._declared_at = context.path / "defs.yaml"
        return component

    @property
    def declared_at(self) -> Path | None:
        """The file that declares it: its defs.yaml, or the Python module of its function."""
        return self._declared_at

    # --- the declaration ---------------------------------------------------------------------------------------

    def parameter_defaults(self) -> dict[str, str]:
        return {name: str(p.default) for name, p in self.parameters.items()}

    def reads(self) -> tuple[tuple[str, ...], tuple[str, ...]]:
        """The tables it streams, and those it reads as they are: from its SQL, or as its function declares them."""
        if self._reads is not None:
            return self._reads
        sql = self.read_sql()
        return sql.streamed, sql.static

    def read_sql(self) -> StreamingSql:
        """Its SQL, read once with its parameters' defaults; a ConfigurationError naming this declaration when it
        cannot be: SQL that does not parse, or uses a parameter it does not declare."""
        if self._sql is None:
            self._sql = self._parsed_sql()
        return self._sql

    def _parsed_sql(self) -> StreamingSql:
        try:
            if not self.sql.strip():
                raise ConfigurationError("`sql` is empty: give the table's query")
            undeclared = [p for p in parameters_in(self.sql) if p not in self.parameters]
            if undeclared:
                raise ConfigurationError(
                    f"the SQL uses {', '.join('${' + p + '}' for p in undeclared)}: declare each under `parameters` "
                    "with its default"
                )
            return read_sql(self.sql, self.parameter_defaults())
        except ConfigurationError as exc:
            raise ConfigurationError(f"{self.declared_at}: {self.name}: {exc}") from exc

    def table_query(self) -> StreamingTableQuery:
        """The library's declaration of the table: what the engine runs, and what a unit test runs on rows."""
        streams, tables = self.reads()
        return StreamingTableQuery(
            name=self.name,
            streams=streams,
            tables=tables,
            transformation=self._transformation or SqlTransformation(self.sql),
            mode=self.mode,
            keys=tuple(self.keys),
            watermarks={name: Watermark(w.column, w.delay) for name, w in self.watermarks.items()},
            sequence_by=self.sequence_by,
            late_rows_table=self.late_rows_table,
            foreach_batch=self._foreach_batch,
            after_run=self._after_run,
            expectations=self.rules(),
            quarantine_table=self.quarantine_table_name(),
        )

    def rules(self) -> tuple[Expectation, ...]:
        """Its expectations, as the library takes them."""
        return tuple(e.rule() for e in self.expectations)

    def quarantine_table_name(self) -> str | None:
        """The table of the rows its `drop` rules set aside; None when it has none."""
        if not drop_rules(self.rules()):
            return None
        return self.quarantine_table or f"{self.name}_quarantine"

    def quarantine(self, table: Table) -> WrittenTable | None:
        """The quarantine table of `table` (its columns, then the rules broken, the micro-batch and the time)."""
        name = self.quarantine_table_name()
        if name is None:
            return None
        added = quarantine_columns(self.name)
        rules = ", ".join(f"{r.name} ({r.constraint})" for r in self.rules() if r.on_violation == "drop")
        return WrittenTable(
            Table(name, self.group, table.columns + added, columns_from_query=table.columns_from_query),
            f"The rows of {self.name} that broke a `drop` rule ({rules}), as they were, with the rules each broke, "
            f"set aside instead of written to {self.name}. A row fixed upstream can be written back: "
            f"`INSERT INTO {self.name} SELECT * EXCEPT ({RULES_BROKEN}, {BATCH_ID}, {QUARANTINED_AT}) FROM ...`.",
            tuple(self.owners),
            downstream_of=(self.name,),
        )

    def declared_columns(self) -> dict[str, ColumnAttributes]:
        return {
            name: column if isinstance(column, ColumnAttributes) else ColumnAttributes(description=column)
            for name, column in self.columns.items()
        }

    def table(self) -> Table:
        """The table: with a declared schema when every column has a type, else the columns its query gives."""
        declared = self.declared_columns()
        columns = tuple(Column(name, (c.type or "").lower(), c.description) for name, c in declared.items())
        typed = bool(declared) and all(c.type for c in declared.values())
        return Table(self.name, self.group, columns, columns_from_query=not typed)

    def late_rows(self) -> WrittenTable | None:
        """The table of the micro-batches whose watermark dropped rows, when it declares one."""
        if self.late_rows_table is None:
            return None
        streams, _ = self.reads()
        return WrittenTable(
            Table(self.late_rows_table, self.group, LATE_ROWS_COLUMNS),
            f"Per micro-batch of the {self.name} query that dropped rows: how many rows of "
            f"{' and '.join(streams)} arrived behind its watermark and were dropped (never joined or counted), so that "
            f"they are counted, not lost silently. The first run of {self.name} creates it (empty until the "
            "watermark drops a row).",
            tuple(self.owners),
        )

    def preview_order(self) -> tuple[str, ...]:
        """How its preview is sorted: an upsert table by its keys, a complete one by the columns it groups by; an
        append table, which grows, shows any rows."""
        if self.mode == "upsert":
            return tuple(self.keys)
        if self.mode == "complete" and self._transformation is None:
            return self.read_sql().grouped_by
        return ()

    def config_class(self) -> type[dg.Config] | None:
        """The run config of its parameters (None: it has none): a field each, its default from the environment."""
        if not self.parameters:
            return None
        fields: dict[str, Any] = {
            name: (
                float if p.type == "number" else str,
                parameter(
                    env=p.env or name.upper(),
                    default=self._typed_default(name),
                    kind=p.type,
                    description=p.description or f"The SQL's ${{{name}}}",
                ),
            )
            for name, p in self.parameters.items()
        }
        model = pydantic.create_model(f"{self.name}_config", __base__=_ParametersConfig, __module__=__name__, **fields)
        model.TABLE = self.name
        return model

    def _typed_default(self, name: str) -> str | float:
        """A parameter's default as its type takes it; a ConfigurationError naming it when it is not of its type."""
        declared = self.parameters[name]
        if declared.type == "number":
            try:
                return float(declared.default)
            except ValueError:
                raise ConfigurationError(
                    f"{self.declared_at}: {self.name}: parameter {name}: default {declared.default!r} is not a number "
                    "(`type: number`)"
                ) from None
        if declared.type == "interval":
            interval_seconds(
                str(declared.default), name=f"{self.declared_at}: {self.name}: the default of parameter {name}"
            )
        return str(declared.default)

    def streamed_table(self) -> StreamedTable:
        """Its step, as the continuous run, the fast runs and table maintenance find every step of the project."""
        if self._step is None:
            self._step = self._step_writing(self.table())
        return self._step

    def _step_writing(self, table: Table) -> StreamedTable:
        streams, tables = self.reads()
        late_rows = self.late_rows()
        quarantine = self.quarantine(table)
        return StreamedTable(
            step=self.name,
            writes=[
                WrittenTable(table, self.description or self._default_description(), tuple(self.owners)),
                *([late_rows] if late_rows is not None else []),
                *([quarantine] if quarantine is not None else []),
            ],
            expectations=self.rules(),
            reads=[*streams, *tables],
            query=functools.partial(_query, self.table_query()),
            compute=functools.partial(
                _materialized,
                table,
                self.preview_order(),
                late_rows.table if late_rows is not None else None,
                bool(self.watermarks),
                None if self._metadata is None else (self.table_query(), self._metadata),
                self.rules(),
                quarantine.table if quarantine is not None else None,
            ),
            priority=self.priority,
            config=self.config_class(),
            latency_critical=self.latency_critical,
            updates_in_place=self.mode != "append",
        )

    def _default_description(self) -> str:
        streams, tables = self.reads()
        reads = ", ".join([*(f"STREAM({name})" for name in streams), *tables])
        return f"A streaming table ({self.mode}) from {reads}."

    # --- building ----------------------------------------------------------------------------------------------

    def build_defs(self, context: dg.ComponentLoadContext) -> dg.Definitions:
        """Read when the definitions load: the checks of the declaration against the project (each refusal names
        this file), then the step's asset."""
        tree = context.component_tree
        try:
            self._check(tree)
        except ConfigurationError as exc:
            if str(self.declared_at) in str(exc):
                raise
            raise ConfigurationError(f"{self.declared_at}: {exc}") from exc
        from streaming_pipeline.lakehouse.settings import LiveSettings

        live = LiveSettings.from_env()
        streams, _ = self.reads()
        # the table as the project declares it: with the descriptions of the columns it passes through
        table = declared_tables(_sources(tree), streamed_tables(tree))[self.name]
        return dg.Definitions(
            assets=[self._step_writing(table).asset(live)],
            asset_checks=[not_behind_sources_check(self.name, streams, live.freshness_seconds)],
        )

    def _check(self, tree: dg.ComponentTree) -> None:
        if not _NAME.fullmatch(self.name):
            raise ConfigurationError(f"name {self.name!r} is not a table name (letters, digits and _)")
        untyped = [name for name, c in self.declared_columns().items() if not c.type]
        if untyped and len(untyped) < len(self.columns):
            raise ConfigurationError(
                f"{self.name}: `columns` gives the type of some columns and not of {', '.join(untyped)}: declare the "
                "type of every column (a declared schema) or of none"
            )
        self._check_expectations()
        if self._transformation is not None:
            return self._check_declared_reads(tree)
        for name in self.parameters:
            self._typed_default(name)
        used = set(self.read_sql().parameters) | {p for w in self.watermarks.values() for p in parameters_in(w.delay)}
        unused = sorted(set(self.parameters) - used)
        if unused:
            raise ConfigurationError(f"{self.name}: parameter(s) {', '.join(unused)} are not used by the SQL")
        self._check_declared_reads(tree)

    def _check_expectations(self) -> None:
        table = self.table()
        if not table.columns_from_query:
            columns: Sequence[str] | None = table.column_names
        else:
            columns = None if self._transformation is not None else self.read_sql().columns
        try:
            check_expectations(self.rules(), columns)
        except ConfigurationError as exc:
            raise ConfigurationError(f"{self.name}: {exc}") from None
        dropping = drop_rules(self.rules())
        if dropping and self.mode != "append":
            raise ConfigurationError(
                f"{self.name}: expectation {dropping[0]!r} drops rows, which only an append table can set aside "
                f"(this one is `mode: {self.mode}`): use `warn` or `fail`"
            )
        if dropping and self._foreach_batch is not None:
            raise ConfigurationError(
                f"{self.name}: expectation {dropping[0]!r} drops rows to the quarantine table, which the table's "
                "own sink (`foreach_batch`) does not write: use `warn` or `fail`"
            )
        if self.quarantine_table is not None and not dropping:
            raise ConfigurationError(
                f"{self.name}: `quarantine_table` takes the rows that `drop` rules set aside, and it has none"
            )

    def _check_declared_reads(self, tree: dg.ComponentTree) -> None:
        streams, tables = self.reads()
        self._check_shape(streams)
        self._check_sources(tree, streams, tables)

    def _check_shape(self, streams: Sequence[str]) -> None:
        if not streams:
            raise ConfigurationError(
                f"{self.name}: it streams no table: mark the table it streams from STREAM(<table>)"
            )
        stray = sorted(set(self.watermarks) - set(streams))
        if stray:
            raise ConfigurationError(
                f"{self.name}: watermarks for {', '.join(stray)}, which it does not stream (it streams "
                f"{', '.join(streams)})"
            )
        for name, watermark in self.watermarks.items():
            undeclared = [p for p in parameters_in(watermark.delay) if p not in self.parameters]
            if undeclared:
                raise ConfigurationError(
                    f"{self.name}: the watermark delay of {name} uses ${{{undeclared[0]}}}: declare it under "
                    "`parameters` with its default"
                )
            delay = substitute(watermark.delay, self.parameter_defaults())
            interval_seconds(delay, name=f"{self.name}: the watermark delay of {name}")
        if self.late_rows_table is not None and not self.watermarks:
            raise ConfigurationError(
                f"{self.name}: `late_rows_table` records the rows its watermark drops: declare `watermarks`"
            )
        if self.mode == "upsert" and not self.keys:
            raise ConfigurationError(f"{self.name}: `mode: upsert` merges rows by key: set `keys`, the key columns")
        if self.mode != "upsert" and (self.keys or self.sequence_by):
            raise ConfigurationError(f"{self.name}: `keys` and `sequence_by` are for `mode: upsert`")
        if self._transformation is not None:
            return
        aggregates = self.read_sql().aggregates
        if self.mode == "append" and aggregates and not self.watermarks:
            raise ConfigurationError(
                f"{self.name}: an aggregation in `mode: append` emits a group once its watermark passes: declare "
                "`watermarks` for the table it streams, or use `mode: complete` (a small aggregate) or "
                "`mode: upsert` with `keys`"
            )
        if self.mode == "complete" and not aggregates:
            raise ConfigurationError(
                f"{self.name}: `mode: complete` rewrites an aggregate at each micro-batch, and the SQL does not "
                "aggregate: use `mode: append`"
            )

    def _check_sources(self, tree: dg.ComponentTree, streams: Sequence[str], tables: Sequence[str]) -> None:
        sources = _sources(tree)
        steps = streamed_tables(tree)
        writers = [step for step in steps if self.name in step.table_names]
        if len(writers) > 1 or any(self.name == t.name for s in sources for t in s.tables):
            raise ConfigurationError(f"table {self.name!r} is declared more than once in the project")
        known = set(declared_tables(sources, steps))
        unknown = [name for name in [*streams, *tables] if name not in known]
        if unknown:
            raise ConfigurationError(
                f"{self.name} reads {', '.join(unknown)}, which no declaration of the project writes (the tables: "
                f"{', '.join(sorted(known))})"
            )
        updated = {t.name for s in sources if s.is_table_topic for t in s.tables}
        updated |= {
            name for step in steps if step.step != self.name and step.updates_in_place for name in step.table_names
        }
        streamed_updated = [name for name in streams if name in updated]
        if streamed_updated:
            raise ConfigurationError(
                f"{self.name} streams {', '.join(streamed_updated)}, which is updated in place (a table topic, or an "
                "upsert or complete table): a stream reads appends only. Read it as it is at each micro-batch, "
                "without STREAM (a stream-static join)"
            )

    # --- Python ------------------------------------------------------------------------------------------------

    @classmethod
    def of_function(
        cls,
        function: Callable[..., Any],
        context: dg.ComponentLoadContext,
        *,
        streams: Sequence[str],
        tables: Sequence[str] = (),
        foreach_batch: ForeachBatch | None = None,
        after_run: AfterRun | None = None,
        metadata: RunMetadata | None = None,
        **attributes: Any,
    ) -> Self:
        """The component of a table whose query is a Python function (`streaming_table`)."""
        component = cls(name=attributes.pop("name", function.__name__), **attributes)
        if component.description is None:
            component.description = inspect.getdoc(function)
        component._transformation = _FunctionTransformation(function)
        component._foreach_batch, component._after_run, component._metadata = foreach_batch, after_run, metadata
        component._reads = (tuple(streams), tuple(tables))
        component._declared_at = context.path
        return component


class _FunctionTransformation:
    """A streaming table's Python function, called with each input by its table name, and with its parameters'
    values as `parameters` when it takes that argument."""

    def __init__(self, function: Callable[..., Any]) -> None:
        self.function = function
        self.takes_parameters = "parameters" in inspect.signature(function).parameters

    def __call__(self, spark: Any, inputs: Any) -> Any:
        parameters = {"parameters": dict(inputs.parameters)} if self.takes_parameters else {}
        return self.function(**inputs.streams, **inputs.tables, **parameters)


def streaming_table(
    *,
    streams: Sequence[str],
    tables: Sequence[str] = (),
    **attributes: Any,
) -> Callable[[Callable[..., Any]], Callable[[dg.ComponentLoadContext], StreamingTable]]:
    """A streaming table whose query is a Python function, in a module of the defs folder:

        @streaming_table(streams=["raw_orders"], watermarks={"raw_orders": {"column": "ordered_at", "delay": "1 hour"}})
        def hourly_orders(raw_orders: DataFrame) -> DataFrame:
            '''Orders per hour.'''
            return raw_orders.groupBy(F.window("ordered_at", "1 hour")).count()

    The function takes each table it reads by name (a streaming DataFrame for `streams`, the table as it is for
    `tables`), and `parameters` (a dict of the declared parameters' values) when it names that argument, and returns
    the table's rows; the other arguments are the YAML's attributes (`mode`, `keys`,
    `watermarks`, `group`, `columns`, `owners`, ...), and what only Python can give, each called with the table's
    `TableTarget` (session, lakehouse, path, checkpoint, parameter values):

    - `foreach_batch`: a sink of its own (Spark's foreachBatch, Lakeflow's `foreach_batch_sink`): returns the
      handler of each micro-batch, when the query starts; it must write a micro-batch run again after a crash to the
      same rows (a MERGE by key), as the shapes' sinks do. With `mode: upsert` it gets the rows each micro-batch
      changed;
    - `after_run`: work that needs the query at rest (a reconcile, a compaction): after each triggered run, and
      every CONTINUOUS_RECONCILE_SECONDS in continuous mode, the query stopped for it;
    - `metadata`: called with the target and what `after_run` returned, the metadata a triggered run adds to the
      table's materialization.

    The module's name for the function becomes the component's load function; the function stays reachable as
    its `function` attribute, for unit tests (`StreamingTable.table_query().rows_for`)."""

    def declare(function: Callable[..., Any]) -> Callable[[dg.ComponentLoadContext], StreamingTable]:
        def load(context: dg.ComponentLoadContext) -> StreamingTable:
            return StreamingTable.of_function(function, context, streams=streams, tables=tables, **attributes)

        load.__annotations__ = {"context": dg.ComponentLoadContext, "return": StreamingTable}
        load.__name__ = load.__qualname__ = function.__name__
        load.__module__ = function.__module__
        declared = dg.component_instance(load)
        declared.function = function  # type: ignore[attr-defined]
        return declared

    return declare


def _sources(tree: dg.ComponentTree) -> list[SourceTopic]:
    from streaming_pipeline.components.kafka_delta_source import KafkaDeltaSource

    return [c.source for c in tree.get_all_components(of_type=KafkaDeltaSource)]


class _ParametersConfig(dg.Config):
    """The run config of a streaming table's parameters: an `interval` is checked when the config is made (a
    launchpad value too), with an error naming the table, the field and the value."""

    TABLE: ClassVar[str] = ""

    @pydantic.model_validator(mode="after")
    def _check_intervals(self) -> Self:
        for p in parameters_of(type(self)):
            if p.kind == "interval":
                normalize_interval(getattr(self, p.field), name=f"{self.TABLE} {p.field}")
        return self


def _parameter_values(config: Any) -> dict[str, Any]:
    return {} if config is None else {p.field: getattr(config, p.field) for p in parameters_of(type(config))}


def _query(table_query: StreamingTableQuery, inputs: QueryInputs, config: Any) -> Any:
    values = _parameter_values(config)
    return table_query.query(inputs.spark, inputs.lakehouse, values, run_id=inputs.run_id, log=inputs.log)


def _materialized(
    table: Table,
    preview_order: tuple[str, ...],
    late_rows_table: Table | None,
    watermarked: bool,
    metadata: tuple[StreamingTableQuery, RunMetadata] | None,
    rules: tuple[Expectation, ...],
    quarantine_table: Table | None,
    step: StepRun,
) -> Iterator[dg.MaterializeResult | dg.AssetCheckResult]:
    """The materialization of the table, and of its late-rows and quarantine tables: with a watermark, the rows it
    dropped; with a `metadata` hook, what it adds; with expectations, what each rule found (and its check)."""
    run = step.run()
    counts = counts_of(run.report.progresses, rules)
    late: dict[str, Any] = {}
    if watermarked:
        dropped = late_rows_of(run)
        late["rows_dropped_by_watermark"] = dg.MetadataValue.int(dropped.rows_dropped_by_watermark)
        if dropped.watermark is not None:
            late["watermark"] = dg.MetadataValue.text(str(dropped.watermark))
    lakehouse = step.lakehouse
    added: Mapping[str, Any] = {}
    if metadata is not None:
        table_query, metadata_of = metadata
        target = table_query.target(step.spark, lakehouse, _parameter_values(step.config), step.context.log)
        added = metadata_of(target, run.after_stop)
    yield dg.MaterializeResult(
        asset_key=table.name,
        metadata={
            **stream_metadata(run.report),
            **late,
            **delta_table_metadata(step.spark, lakehouse, table, preview_order=list(preview_order) or None),
            **expectation_metadata(counts, rules),
            **added,
        },
    )
    yield from expectation_checks(table.name, counts, rules)
    if quarantine_table is not None:
        yield dg.MaterializeResult(
            asset_key=quarantine_table.name,
            metadata={
                "rows_quarantined": dg.MetadataValue.int(counts.dropped),
                **delta_table_metadata(step.spark, lakehouse, quarantine_table, preview_order=[BATCH_ID]),
            },
        )
    if late_rows_table is None:
        return
    path = step.lakehouse.table_path(late_rows_table.name)
    total = sum_columns(step.spark, path, ["rows_dropped_by_watermark"])["rows_dropped_by_watermark"]
    yield dg.MaterializeResult(
        asset_key=late_rows_table.name,
        metadata={
            **late,
            "rows_dropped_by_watermark_total": dg.MetadataValue.int(int(total or 0)),
            "micro_batches_recorded": dg.MetadataValue.int(late_rows_of(run).batches_recorded),
            **delta_table_metadata(step.spark, step.lakehouse, late_rows_table, preview_order=["query_id", "batch_id"]),
        },
    )
