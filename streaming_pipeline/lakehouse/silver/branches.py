"""The amount branches (the course's Faust app): raw_rides split by total_amount into high_amount_rides and
low_amount_rides, in one stream whose foreachBatch handler appends to both exactly once."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from pyspark.sql import functions as F

from streaming_pipeline.lakehouse.engine.streams import (
    QueryRun,
    StreamQuery,
    StreamRunReport,
    delta_stream,
)
from streaming_pipeline.lakehouse.tables import AMOUNT_BRANCHES, HIGH_AMOUNT_RIDES, LOW_AMOUNT_RIDES, RAW_RIDES

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.streaming import DataStreamWriter

    from streaming_pipeline.lakehouse.connections import Lakehouse

HIGH_AMOUNT = HIGH_AMOUNT_RIDES.name
LOW_AMOUNT = LOW_AMOUNT_RIDES.name


@dataclass
class AmountBranchWriter:
    """foreachBatch handler that branches each micro-batch of raw_rides into the high- and low-amount tables.

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

    def __call__(self, batch: DataFrame, batch_id: int) -> None:
        import uuid

        from pyspark.sql import Observation

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
                branch_app_id(HIGH_AMOUNT, query),
                batch_id,
                attempt,
                merge_schema=True,
            )
            null_amount = int(observation.get["null_amount"]) if wrote_high else None
            append_once(
                low_amount_rides(cached, self.threshold),
                self.low_path,
                branch_app_id(LOW_AMOUNT, query),
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


def amount_branches_query(spark: SparkSession, lakehouse: Lakehouse, *, high_amount_threshold: float) -> StreamQuery:
    """raw_rides branched by total_amount (>= high_amount_threshold goes high, below goes low, null to neither)."""
    high_path, low_path = lakehouse.table_path(HIGH_AMOUNT), lakehouse.table_path(LOW_AMOUNT)
    handler = AmountBranchWriter(high_path, low_path, high_amount_threshold, branches_checkpoint(lakehouse))

    def start_writer() -> DataStreamWriter:
        return (
            delta_stream(spark, lakehouse, RAW_RIDES.name)
            .writeStream.foreachBatch(handler)
            .option("checkpointLocation", handler.checkpoint_dir)
        )

    return StreamQuery(AMOUNT_BRANCHES, start_writer, tables=(HIGH_AMOUNT, LOW_AMOUNT))


def branches_checkpoint(lakehouse: Lakehouse) -> str:
    """The checkpoint of the branch stream, which writes both tables."""
    return lakehouse.checkpoint_path(f"{HIGH_AMOUNT}+{LOW_AMOUNT}")


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


def branches_position(lakehouse: Lakehouse) -> BranchesPosition | None:
    """Where the branch stream stands, pinned to versions that belong together while it writes: the low-amount
    table's newest batch that ended on a whole raw_rides version (a batch appends to high first, then low), and
    the high-amount table at that batch. None when there is no such batch among the newest commits."""
    from streaming_pipeline.lakehouse.bronze.offsets import checkpoint_id
    from streaming_pipeline.lakehouse.engine.sink_position import delta_sink_position, version_after_batch

    checkpoint = branches_checkpoint(lakehouse)
    query = checkpoint_id(checkpoint)
    if query is None:
        return None
    low = delta_sink_position(lakehouse.table_path(LOW_AMOUNT), checkpoint, app_id=branch_app_id(LOW_AMOUNT, query))
    if low is None:
        return None
    high = version_after_batch(lakehouse.table_path(HIGH_AMOUNT), branch_app_id(HIGH_AMOUNT, query), low.batch_id)
    return BranchesPosition(high, low.table_version, low.source_version)


def branch_writes(lakehouse: Lakehouse, run: Callable[[], QueryRun]) -> BranchRunResult:
    """What one run of the branch query (`run`) wrote to each table: its commits to them, found by the query's
    txnAppIds among the versions committed during the run."""
    from streaming_pipeline.lakehouse.bronze.offsets import checkpoint_id
    from streaming_pipeline.lakehouse.engine.delta_log import commits_since, latest_version

    high_path, low_path = lakehouse.table_path(HIGH_AMOUNT), lakehouse.table_path(LOW_AMOUNT)
    before = latest_version(high_path), latest_version(low_path)
    report = run().report
    checkpoint = checkpoint_id(branches_checkpoint(lakehouse))
    high = commits_since(high_path, before[0], branch_app_id(HIGH_AMOUNT, checkpoint))
    low = commits_since(low_path, before[1], branch_app_id(LOW_AMOUNT, checkpoint))
    return BranchRunResult(
        report,
        high_rows=sum(c.rows for c in high),
        low_rows=sum(c.rows for c in low),
        null_amount_rides=sum(int(c.marker.get("null_amount_rides") or 0) for c in low),
    )
