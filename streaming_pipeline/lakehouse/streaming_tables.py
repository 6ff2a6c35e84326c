"""A streaming table declared by its query, in SQL or in Python, and run as one Structured Streaming query: its
inputs read from the lakehouse (a streamed table with its watermark, any other as it is at each micro-batch), its
transformation, and its sink by shape:

- `append`: each micro-batch's new rows appended to Delta (an aggregation emits a group once its watermark passes);
- `complete`: the whole result rewritten at each micro-batch (a small aggregate);
- `upsert`: the rows each micro-batch changed, merged into the table by `keys` (Delta MERGE);

or by a foreachBatch sink of the table's own (`foreach_batch`), with work done after each run with the query at
rest (`after_run`). Its expectations (`lakehouse.expectations`) are observed as its rows pass; `drop` rules write
through a handler that sets rows aside in the quarantine table, and `fail` rules check each micro-batch in the
handler before anything of it is written.

A column the query gains (a new field of a source's schema, through `SELECT *`) joins the table, null in the rows
written before it: the Delta sink merges the schema, and the MERGE evolves it.

Exactly once: the query's checkpoint (one per table) records what it read; the Delta sink commits each micro-batch
once, and a MERGE of the same micro-batch again writes the same rows.

Plain Python and Spark, no Dagster: the upsert handler runs in the engine's Python worker.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from streaming_pipeline.lakehouse.engine.delta_tables import count_rows, delta_path_sql, table_exists
from streaming_pipeline.lakehouse.engine.sink_position import checkpoint_query_id
from streaming_pipeline.lakehouse.engine.streams import Log, StreamQuery, delta_stream
from streaming_pipeline.lakehouse.errors import StreamingTableStateError
from streaming_pipeline.lakehouse.expectations import (
    CheckedRows,
    DeltaWriteOnce,
    Expectation,
    FailOnViolation,
    QuarantiningAppend,
    checked,
    checked_rows,
    drop_rules,
    fail_rules,
)
from streaming_pipeline.lakehouse.late_rows import LateRowsRecorder
from streaming_pipeline.lakehouse.streaming_sql import read_sql, substitute

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.streaming import DataStreamWriter

    from streaming_pipeline.lakehouse.connections import Lakehouse

Mode = Literal["append", "complete", "upsert"]
MODES: tuple[Mode, ...] = ("append", "complete", "upsert")


@dataclass(frozen=True)
class Watermark:
    """How late a streamed input's rows may arrive: `column` is its event time, `delay` a Spark interval (or a
    `${parameter}` of the table)."""

    column: str
    delay: str

    def delay_given(self, parameters: Mapping[str, Any]) -> str:
        """The delay with its parameters' values."""
        return substitute(self.delay, parameters)


@dataclass(frozen=True)
class Inputs:
    """What a streaming table's transformation is given: each table it streams (watermarked as declared) and each
    table it reads as it is, by name; and its parameters' values."""

    streams: Mapping[str, DataFrame]
    tables: Mapping[str, DataFrame]
    parameters: Mapping[str, Any] = field(default_factory=dict)


#: A transformation: the session and the inputs to the table's rows.
Transformation = Callable[["SparkSession", Inputs], "DataFrame"]


@dataclass(frozen=True)
class TableTarget:
    """Where a streaming table's query writes, as its Python hooks are given it (`foreach_batch`, `after_run`): the
    session, the lakehouse, the table's name, path and checkpoint, the run's parameter values, and where to log."""

    spark: SparkSession
    lakehouse: Lakehouse
    name: str
    table_path: str
    checkpoint_path: str
    parameters: Mapping[str, Any]
    log: Log | None = None


#: A foreachBatch sink of a table's own: from the target, when its query starts, the handler of each micro-batch
#: (the rows, the batch id), as Spark's `foreachBatch` takes it.
ForeachBatch = Callable[[TableTarget], Callable[["DataFrame", int], None]]
#: Work on the table that needs its query at rest: after each triggered run, and now and then in continuous mode.
AfterRun = Callable[[TableTarget], Any]


@dataclass(frozen=True)
class SqlTransformation:
    """A streaming table's SQL (`streaming_sql`), run with each table reference replaced by its input."""

    sql: str

    def __call__(self, spark: SparkSession, inputs: Inputs) -> DataFrame:
        text, arguments = read_sql(self.sql, inputs.parameters).with_arguments()
        frames: dict[str, Any] = {
            argument: (inputs.streams if streamed else inputs.tables)[table]
            for argument, (table, streamed) in arguments.items()
        }
        return spark.sql(text, **frames)


@dataclass(frozen=True)
class StreamingTableQuery:
    """A streaming table as the engine runs it: its name (which names its checkpoint), what it streams and reads,
    its transformation, its shape and keys, the watermark of each streamed input that has one, and the table that
    records the micro-batches whose watermark dropped rows (`late_rows`)."""

    name: str
    streams: tuple[str, ...]
    tables: tuple[str, ...]
    transformation: Transformation
    mode: Mode = "append"
    keys: tuple[str, ...] = ()
    watermarks: Mapping[str, Watermark] = field(default_factory=dict)
    sequence_by: str | None = None
    late_rows_table: str | None = None
    foreach_batch: ForeachBatch | None = None
    after_run: AfterRun | None = None
    expectations: tuple[Expectation, ...] = ()
    quarantine_table: str | None = None

    @property
    def tables_written(self) -> tuple[str, ...]:
        """The table, and the late-rows and quarantine tables its query writes too."""
        others = (self.late_rows_table, self.quarantine_table if drop_rules(self.expectations) else None)
        return (self.name, *(name for name in others if name is not None))

    @property
    def reads(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys([*self.streams, *self.tables]))

    def frame(self, spark: SparkSession, lakehouse: Lakehouse, parameters: Mapping[str, Any]) -> DataFrame:
        """The table's rows as a streaming DataFrame over the lakehouse, its expectations applied
        (`expectations.checked`)."""
        streams = {
            name: self.watermarked(name, delta_stream(spark, lakehouse, name), parameters) for name in self.streams
        }
        tables = {name: spark.read.format("delta").load(lakehouse.table_path(name)) for name in self.tables}
        rows = self.transformation(spark, Inputs(streams, tables, parameters))
        return checked(rows, self.name, self.expectations) if self.expectations else rows

    def target(
        self, spark: SparkSession, lakehouse: Lakehouse, parameters: Mapping[str, Any], log: Log | None = None
    ) -> TableTarget:
        """Where its query writes in `lakehouse`, with the run's parameter values: what its hooks are given."""
        name = self.name
        return TableTarget(
            spark, lakehouse, name, lakehouse.table_path(name), lakehouse.checkpoint_path(name), dict(parameters), log
        )

    def watermarked(self, name: str, frame: DataFrame, parameters: Mapping[str, Any]) -> DataFrame:
        watermark = self.watermarks.get(name)
        return frame if watermark is None else frame.withWatermark(watermark.column, watermark.delay_given(parameters))

    def query(
        self,
        spark: SparkSession,
        lakehouse: Lakehouse,
        parameters: Mapping[str, Any],
        *,
        run_id: str | None = None,
        log: Log | None = None,
    ) -> StreamQuery:
        """The table's streaming query, ready to run once or keep running, with the source paths it waits for; with
        a late-rows table, what its watermark drops is recorded there (for the Dagster run `run_id`, a warning
        to `log`). A sink of its own (`foreach_batch`) gets each micro-batch instead of the shape's sink (an `upsert`
        table's micro-batches are its changed rows), and `after_run` is the query's `after_stop`."""
        target = self.target(spark, lakehouse, parameters, log)
        path, checkpoint = target.table_path, target.checkpoint_path

        def start_writer() -> DataStreamWriter:
            if self.mode == "append":
                refuse_rows_without_checkpoint(spark, self.name, path, checkpoint)
            rows = self.frame(spark, lakehouse, parameters)
            handler = self.handler(target)
            if handler is not None:
                writer = rows.writeStream.outputMode("update" if self.mode == "upsert" else self.mode)
                return writer.foreachBatch(handler).option("checkpointLocation", checkpoint)
            return (
                rows.writeStream.format("delta")
                .outputMode(self.mode)
                .option("checkpointLocation", checkpoint)
                .option("path", path)
                # A column a streamed table gained (a new field of its source's schema) joins the table.
                .option("mergeSchema", "true")
            )

        late = self.late_rows_table
        return StreamQuery(
            self.name,
            start_writer,
            tables=self.tables_written,
            source_paths=tuple(lakehouse.table_path(name) for name in self.reads),
            on_progress=None
            if late is None
            else LateRowsRecorder(spark, self.name, late, lakehouse.table_path(late), run_id, log),
            after_stop=None if self.after_run is None else functools.partial(self.after_run, target),
        )

    def handler(self, target: TableTarget) -> Callable[[DataFrame, int], None] | None:
        """The foreachBatch handler of its micro-batches; None for the Delta sink. `drop` rules write the kept rows
        and the quarantined ones; a sink of its own gets them otherwise, then an `upsert` table's MERGE; `fail`
        rules check each micro-batch before any of these writes it."""
        checkpoint = target.checkpoint_path
        fails = fail_rules(self.expectations)
        handler: Callable[[DataFrame, int], None]
        dropping = drop_rules(self.expectations)
        if dropping:
            assert self.quarantine_table is not None  # the declaration names it with its `drop` rules
            quarantine = target.lakehouse.table_path(self.quarantine_table)
            handler = QuarantiningAppend(self.name, target.table_path, quarantine, checkpoint, dropping)
        elif self.foreach_batch is not None:
            handler = self.foreach_batch(target)
        elif self.mode == "upsert":
            handler = KeyedUpsert(target.table_path, self.keys, self.sequence_by)
        elif fails:
            handler = DeltaWriteOnce(self.name, target.table_path, checkpoint, self.mode)
        else:
            return None
        return FailOnViolation(handler, self.name, fails) if fails else handler

    def rows_for(
        self,
        spark: SparkSession,
        inputs: Mapping[str, DataFrame],
        parameters: Mapping[str, Any] | None = None,
    ) -> DataFrame:
        """The transformation on the batch DataFrames `inputs` (by table name) instead of the lakehouse: what a
        unit test asserts on, with no Kafka, no Delta and no checkpoint. A watermark is declared on a batch frame
        too, where Spark ignores it."""
        missing = sorted(set(self.reads) - set(inputs))
        if missing:
            raise ValueError(f"{self.name} reads {', '.join(missing)}: give a DataFrame for each")
        given = dict(parameters or {})
        streams = {name: self.watermarked(name, inputs[name], given) for name in self.streams}
        tables = {name: inputs[name] for name in self.tables}
        return self.transformation(spark, Inputs(streams, tables, given))

    def checked_rows_for(
        self,
        spark: SparkSession,
        inputs: Mapping[str, DataFrame],
        parameters: Mapping[str, Any] | None = None,
    ) -> CheckedRows:
        """`rows_for` through the table's expectations, for a unit test of its rules: the rows written, those set
        aside in the quarantine table and the counts, or the ExpectationError of a `fail` rule broken."""
        return checked_rows(self.rows_for(spark, inputs, parameters), self.name, self.expectations)


def refuse_rows_without_checkpoint(spark: SparkSession, name: str, path: str, checkpoint: str) -> None:
    """Raise StreamingTableStateError when the append table at `path` has rows and its query no checkpoint: a new
    query would read its sources from the start and append every row again. (An empty table is fine: `replay`
    empties the tables downstream and moves their checkpoints aside; a crash before the first commit leaves the
    checkpoint, whose query id the Delta sink's writes carry.)"""
    if checkpoint_query_id(checkpoint) is not None or not table_exists(path):
        return
    rows = count_rows(spark, path)
    if rows:
        raise StreamingTableStateError(
            f"{name} holds {rows} row(s) but its checkpoint {checkpoint} does not exist: a new query would append "
            f"every row of its sources again. Restore the checkpoint, or delete the table {path} to rebuild it from "
            "its sources (`streaming-pipeline replay <source>` rebuilds everything downstream of a source)"
        )


@dataclass
class KeyedUpsert:
    """foreachBatch handler of an `upsert` table: the micro-batch's rows merged into the table by `keys`, one row per
    key. With `sequence_by`, a key's row is the one with the highest value of that column, in the micro-batch and
    against the table (a row that arrives after a newer one of its key changes nothing), as Lakeflow's AUTO CDC
    orders changes; without it, the batch's row replaces the table's, and of several rows of a key in one micro-batch
    one is kept. A micro-batch merged again after a crash writes the same rows: the table is the same."""

    table_path: str
    keys: Sequence[str]
    sequence_by: str | None = None

    def __call__(self, batch: DataFrame, batch_id: int) -> None:
        """Merge one micro-batch.

        Args:
            batch: The rows the micro-batch changed (in update mode: the groups it updated).
            batch_id: Spark's id of the micro-batch (names the batch's temporary view).
        """
        rows = self.latest_per_key(batch)
        if not table_exists(self.table_path):
            rows.write.format("delta").mode("append").save(self.table_path)
            return
        view = f"upsert_{abs(hash(self.table_path))}_{batch_id}"
        rows.createOrReplaceTempView(view)
        condition = " AND ".join(f"t.`{key}` <=> s.`{key}`" for key in self.keys)
        newer = "" if self.sequence_by is None else f" AND s.`{self.sequence_by}` >= t.`{self.sequence_by}`"
        batch.sparkSession.sql(
            f"MERGE WITH SCHEMA EVOLUTION INTO {delta_path_sql(self.table_path)} t USING {view} s ON {condition} "
            f"WHEN MATCHED{newer} THEN UPDATE SET * WHEN NOT MATCHED THEN INSERT *"
        )
        batch.sparkSession.catalog.dropTempView(view)

    def latest_per_key(self, batch: DataFrame) -> DataFrame:
        """One row per key of `batch`: the one with the highest `sequence_by`, else any one."""
        if self.sequence_by is None:
            return batch.dropDuplicates(list(self.keys))
        from pyspark.sql import Window
        from pyspark.sql import functions as F

        order = Window.partitionBy(*self.keys).orderBy(F.col(self.sequence_by).desc())
        ranked = batch.withColumn("__upsert_rank", F.row_number().over(order))
        return ranked.where("__upsert_rank = 1").drop("__upsert_rank")
