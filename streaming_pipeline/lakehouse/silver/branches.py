"""The amount branches (the course's Faust app): a table of rides split by total_amount into a high- and a low-amount
table, in one stream whose foreachBatch handler appends to both exactly once. The tables are named by the code
location's declaration (`AmountBranches`)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from streaming_pipeline.lakehouse.engine.streams import (
    QueryRun,
    StreamQuery,
    StreamRunReport,
    delta_stream,
)

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.streaming import DataStreamWriter

    from streaming_pipeline.lakehouse.connections import Lakehouse


@dataclass
class AmountBranchWriter:
    """foreachBatch handler that branches each micro-batch of rides into the high- and low-amount tables.

    Both appends carry (txnAppId, txnVersion=batch id), so a batch replayed after a crash is skipped by a table
    that has it. Both merge the batch's schema: a column that raw_rides gained (a new field of the value schema)
    joins the branch tables with its first batch, null in the rows written before it. An Observation counts the
    rides with no total_amount (they go to neither table); the count travels in the marker of the low-amount
    commit, which is written after the high-amount one.
    """

    high_path: str
    low_path: str
    threshold: float
    checkpoint_dir: str
    high_table: str  # the tables' names, which name the appends' txnAppIds
    low_table: str

    def __call__(self, batch: DataFrame, batch_id: int) -> None:
        import uuid

        from pyspark.sql import Observation
        from pyspark.sql import functions as F

        from streaming_pipeline.lakehouse.bronze.offsets import checkpoint_id
        from streaming_pipeline.lakehouse.engine.delta_tables import append_once
        from streaming_pipeline.lakehouse.silver.transformations import high_amount_rides, low_amount_rides

        # One txnAppId per checkpoint: a new checkpoint (after a replay) starts again at batch 0.
        query = checkpoint_id(self.checkpoint_dir)
        attempt = uuid.uuid4().hex
        observation = Observation(f"branch-{batch_id}-{attempt}")
        # Two appends read the batch: cached, the source (raw_rides' new files) is read once, not twice.
        cached = batch.persist()
        try:
            observed = cached.observe(
                observation, F.count(F.when(F.col("total_amount").isNull(), 1)).alias("null_amount")
            )
            wrote_high = append_once(
                high_amount_rides(observed, self.threshold),
                self.high_path,
                branch_app_id(self.high_table, query),
                batch_id,
                attempt,
                merge_schema=True,
            )
            null_amount = int(observation.get["null_amount"]) if wrote_high else None
            append_once(
                low_amount_rides(cached, self.threshold),
                self.low_path,
                branch_app_id(self.low_table, query),
                batch_id,
                attempt,
                extra={"null_amount_rides": null_amount},
                merge_schema=True,
            )
        finally:
            cached.unpersist()


@dataclass
class BranchRunResult:
    report: StreamRunReport
    high_rows: int
    low_rows: int
    null_amount_rides: int


def branch_app_id(table: str, checkpoint: str | None) -> str:
    """The Delta txnAppId of the branch stream's appends to `table`: one per checkpoint, since a new checkpoint
    (after a replay) starts again at batch 0."""
    return f"branch:{table}:{checkpoint}"


@dataclass(frozen=True)
class BranchesPosition:
    """Versions of the two branch tables that hold the same micro-batches, and the raw_rides version those had read."""

    high_version: int | None  # None: none of the high table's newest commits is of those batches
    low_version: int
    raw_rides_version: int


@dataclass(frozen=True)
class AmountBranches:
    """The branch stream: the table it reads (`source`) and the two it writes (`high`, `low`), by name.

    Args:
        source: The rides' table.
        high: The table of rides with total_amount at or above the threshold.
        low: The table of rides below it.
    """

    source: str
    high: str
    low: str

    def checkpoint(self, lakehouse: Lakehouse) -> str:
        """The checkpoint of the branch stream, which writes both tables."""
        return lakehouse.checkpoint_path(f"{self.high}+{self.low}")

    def query(self, spark: SparkSession, lakehouse: Lakehouse, *, name: str, threshold: float) -> StreamQuery:
        """The stream named `name`: `source` branched by total_amount (>= threshold goes high, below goes low, null
        to neither)."""
        handler = AmountBranchWriter(
            lakehouse.table_path(self.high),
            lakehouse.table_path(self.low),
            threshold,
            self.checkpoint(lakehouse),
            self.high,
            self.low,
        )

        def start_writer() -> DataStreamWriter:
            return (
                delta_stream(spark, lakehouse, self.source)
                .writeStream.foreachBatch(handler)
                .option("checkpointLocation", handler.checkpoint_dir)
            )

        return StreamQuery(name, start_writer, tables=(self.high, self.low))

    def position(self, lakehouse: Lakehouse) -> BranchesPosition | None:
        """Where the branch stream stands, pinned to versions that belong together while it writes: the low-amount
        table's newest batch that ended on a whole version of the source (a batch appends to high first, then low),
        and the high-amount table at that batch. None when there is no such batch among the newest commits."""
        from streaming_pipeline.lakehouse.bronze.offsets import checkpoint_id
        from streaming_pipeline.lakehouse.engine.sink_position import delta_sink_position, version_after_batch

        checkpoint = self.checkpoint(lakehouse)
        query = checkpoint_id(checkpoint)
        if query is None:
            return None
        low_path = lakehouse.table_path(self.low)
        low = delta_sink_position(low_path, checkpoint, app_id=branch_app_id(self.low, query))
        if low is None:
            return None
        high = version_after_batch(lakehouse.table_path(self.high), branch_app_id(self.high, query), low.batch_id)
        return BranchesPosition(high, low.table_version, low.source_version)

    def writes(self, lakehouse: Lakehouse, run: Callable[[], QueryRun]) -> BranchRunResult:
        """What one run of the branch query (`run`) wrote to each table: its commits to them, found by the query's
        txnAppIds among the versions committed during the run."""
        from streaming_pipeline.lakehouse.bronze.offsets import checkpoint_id
        from streaming_pipeline.lakehouse.engine.delta_log import commits_since, latest_version

        high_path, low_path = lakehouse.table_path(self.high), lakehouse.table_path(self.low)
        before = latest_version(high_path), latest_version(low_path)
        report = run().report
        checkpoint = checkpoint_id(self.checkpoint(lakehouse))
        high = commits_since(high_path, before[0], branch_app_id(self.high, checkpoint))
        low = commits_since(low_path, before[1], branch_app_id(self.low, checkpoint))
        return BranchRunResult(
            report,
            high_rows=sum(c.rows for c in high),
            low_rows=sum(c.rows for c in low),
            null_amount_rides=sum(int(c.marker.get("null_amount_rides") or 0) for c in low),
        )
