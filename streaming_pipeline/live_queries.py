"""Every streaming query of the pipeline, as the continuous mode keeps them running: one per source's bronze table
(in the order given), then the branches, the enrichment, the join, vendor_counts and the windows. Each is the query
a triggered run's step starts, with the same checkpoint and handler. No Dagster here: `defs/continuous.py` wires
them into a run."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from streaming_pipeline.bronze.ingestion import bronze_query
from streaming_pipeline.gold.vendor_counts import vendor_counts_query
from streaming_pipeline.gold.windows import ride_windows_query
from streaming_pipeline.silver.branches import amount_branches_query
from streaming_pipeline.silver.enrichment import rides_enriched_query
from streaming_pipeline.silver.joins import ride_pickup_joins_query
from streaming_pipeline.tables import (
    AMOUNT_BRANCHES,
    RAW_RIDES,
    RIDE_PICKUP_JOINS,
    RIDE_WINDOW_AGGREGATES,
    RIDES_ENRICHED,
    VENDOR_COUNTS,
)

if TYPE_CHECKING:
    from collections.abc import Sequence

    from pyspark.sql import SparkSession

    from streaming_pipeline.connections import KafkaConnection, Lakehouse, SchemaRegistryConnection
    from streaming_pipeline.engine.streams import Log, StreamQuery
    from streaming_pipeline.sources import SourceTopic


@dataclass(frozen=True)
class QueryParameters:
    """The assets' own parameters (their run config in triggered mode), as Spark intervals ('600 seconds')."""

    high_amount_threshold: float
    join_max_gap: str
    join_watermark_delay: str
    window_duration: str
    window_watermark_delay: str


def live_query_names(sources: Sequence[SourceTopic]) -> list[str]:
    """The names of `live_queries`, in their order, without building them (each names a checkpoint)."""
    return [
        *(source.bronze_table for source in sources),
        AMOUNT_BRANCHES,
        RIDES_ENRICHED.name,
        RIDE_PICKUP_JOINS.name,
        VENDOR_COUNTS.name,
        RIDE_WINDOW_AGGREGATES.name,
    ]


def latency_critical_query_names() -> list[str]:
    """The queries whose tables a user waits for (raw_rides and vendor_counts, which counts it): in continuous mode
    they trigger most often; the others (the other bronze tables, the branches, the enrichment, the join and the
    windows) less often, to leave them the cores. On 2 cores every query that triggers often makes each of their
    micro-batches longer (docs/performance.md). The same tables as a triggered fast run of raw_rides."""
    return fast_run_tables(RAW_RIDES.name)


def fast_run_tables(bronze_table: str) -> list[str]:
    """What a triggered run writes while another run of the same topic works on the tables downstream: the bronze
    table and the latency-critical tables that read only it (vendor_counts reads raw_rides)."""
    return [bronze_table, *([VENDOR_COUNTS.name] if bronze_table == RAW_RIDES.name else [])]


def live_queries(
    spark: SparkSession,
    kafka: KafkaConnection,
    registry: SchemaRegistryConnection,
    lakehouse: Lakehouse,
    parameters: QueryParameters,
    sources: Sequence[SourceTopic],
    *,
    run_id: str | None = None,
    log: Log | None = None,
) -> list[StreamQuery]:
    """The queries, bronze first (one per source). Starting a bronze query checks its table, checkpoint and topic
    (and raises BronzeStateError, naming `streaming-pipeline replay`, when they disagree)."""
    bronze = [bronze_query(spark, kafka, registry, lakehouse, source=source) for source in sources]
    queries = [
        *bronze,
        amount_branches_query(spark, lakehouse, high_amount_threshold=parameters.high_amount_threshold),
        rides_enriched_query(spark, lakehouse),
        ride_pickup_joins_query(
            spark,
            lakehouse,
            join_max_gap=parameters.join_max_gap,
            watermark_delay=parameters.join_watermark_delay,
            run_id=run_id,
            log=log,
        ),
        vendor_counts_query(spark, lakehouse),
        ride_windows_query(
            spark,
            lakehouse,
            window_duration=parameters.window_duration,
            watermark_delay=parameters.window_watermark_delay,
            log=log,
        ),
    ]
    assert [q.name for q in queries] == live_query_names(sources)
    return queries
