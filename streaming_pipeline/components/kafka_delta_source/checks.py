"""The checks of every bronze table (built per source by `sources.py`): reconciliation with the Kafka offsets
consumed, exactly once (unique Kafka coordinates), consumer lag. Each holds while a query writes the table (the
continuous mode's scheduled checks): the reconciliation counts the records below the settled offsets only."""

import dagster as dg

from streaming_pipeline.lakehouse.bronze.offsets import (
    consumed_offsets,
    consumer_lag,
    settled_offsets,
    table_start_offsets,
)
from streaming_pipeline.lakehouse.bronze.table_reconcile import reconcile_table_topic
from streaming_pipeline.lakehouse.engine.delta_tables import count_duplicate_keys, count_rows
from streaming_pipeline.lakehouse.engine.row_filters import all_of, equal_to, kafka_offsets_below
from streaming_pipeline.lakehouse.errors import BronzeStateError, StreamingPipelineError
from streaming_pipeline.lakehouse.sources import SourceTopic
from streaming_pipeline.lakehouse.tables import DEAD_LETTER_RECORDS, KAFKA_KEY
from streaming_pipeline.resources import KafkaResource, LakehouseResource, SparkResource

DEFAULT_MAX_LAG = 100_000


def bronze_checks(source: SourceTopic) -> list[dg.AssetChecksDefinition]:
    """A source's bronze checks: reconciliation with Kafka, exactly once, consumer lag."""
    if source.is_table_topic:
        return [*table_topic_checks(source), consumer_lag_check(source)]
    asset_name, topic = source.bronze_table, source.topic

    @dg.asset_check(
        asset=asset_name,
        name="reconciles_with_kafka_offsets",
        description=f"Rows of {asset_name} plus its dead letters equal the {topic} records its committed "
        "micro-batches consumed (up to the newest one whose dead letters are written too).",
    )
    def reconciles(spark: SparkResource, lakehouse: LakehouseResource) -> dg.AssetCheckResult:
        session = spark.get_session()
        table, checkpoint = lakehouse.table_path(asset_name), lakehouse.checkpoint_path(asset_name)
        try:
            settled = settled_offsets(table, checkpoint, asset_name, topic)
            start = table_start_offsets(table, checkpoint, asset_name, topic)
        except BronzeStateError as exc:
            return dg.AssetCheckResult(passed=False, metadata={"error": str(exc)})
        expected = sum(settled.values()) - sum(start.get(p, 0) for p in settled)
        below = kafka_offsets_below(settled)
        rows = count_rows(session, table, below)
        dead_letters = lakehouse.table_path(DEAD_LETTER_RECORDS.name)
        dead = count_rows(session, dead_letters, all_of(equal_to("kafka_topic", topic), below))
        return dg.AssetCheckResult(
            passed=rows + dead == expected,
            metadata={
                "rows": rows,
                "dead_letters": dead,
                "consumed_records": expected,
                "settled_offsets": {str(p): o for p, o in sorted(settled.items())},
            },
        )

    @dg.asset_check(
        asset=asset_name,
        name="unique_kafka_coordinates",
        description="No (kafka_topic, kafka_partition, kafka_offset) appears twice: exactly once.",
    )
    def unique(spark: SparkResource, lakehouse: LakehouseResource) -> dg.AssetCheckResult:
        duplicates = count_duplicate_keys(spark.get_session(), lakehouse.table_path(asset_name), KAFKA_KEY)
        return dg.AssetCheckResult(passed=duplicates == 0, metadata={"duplicated_keys": duplicates})

    return [reconciles, unique, consumer_lag_check(source)]


def consumer_lag_check(source: SourceTopic) -> dg.AssetChecksDefinition:
    """Records of the topic not yet in the table stay below a bound (offsets: a compacted topic's gaps count)."""
    asset_name, topic = source.bronze_table, source.topic

    @dg.asset_check(
        asset=asset_name,
        name="consumer_lag_below_bound",
        description=f"Records of {topic} not yet in {asset_name} stay below {DEFAULT_MAX_LAG} (warning).",
    )
    def lag(kafka: KafkaResource, lakehouse: LakehouseResource) -> dg.AssetCheckResult:
        try:
            end_offsets = kafka.end_offsets(topic)
            consumed = consumed_offsets(
                lakehouse.table_path(asset_name), lakehouse.checkpoint_path(asset_name), asset_name, topic
            )
        except StreamingPipelineError as exc:
            return dg.AssetCheckResult(passed=False, severity=dg.AssetCheckSeverity.WARN, metadata={"error": str(exc)})
        by_partition = consumer_lag(end_offsets, consumed)
        total = sum(by_partition.values())
        return dg.AssetCheckResult(
            passed=total <= DEFAULT_MAX_LAG,
            severity=dg.AssetCheckSeverity.WARN,
            metadata={
                "lag": total,
                "lag_by_partition": {str(p): n for p, n in by_partition.items()},
                "bound": DEFAULT_MAX_LAG,
            },
        )

    return lag


def table_topic_checks(source: SourceTopic) -> list[dg.AssetChecksDefinition]:
    """A table topic's checks: its table holds the latest value of each key that Kafka holds, one row per key."""
    asset_name, topic = source.bronze_table, source.topic
    key = [c.name for c in source.key_columns]

    @dg.asset_check(
        asset=asset_name,
        name="reconciles_with_kafka_offsets",
        description=f"{asset_name} holds exactly the latest record of each key of {topic} below the offsets it has "
        "consumed (less tombstones and dead letters), read from Kafka now: gaps that compaction left are no alarm.",
    )
    def reconciles(spark: SparkResource, kafka: KafkaResource, lakehouse: LakehouseResource) -> dg.AssetCheckResult:
        try:
            found = reconcile_table_topic(spark.get_session(), kafka, lakehouse, source)
        except BronzeStateError as exc:
            return dg.AssetCheckResult(passed=False, metadata={"error": str(exc)})
        return dg.AssetCheckResult(
            passed=found.passed,
            metadata={
                "rows": found.rows,
                "expected_rows": found.expected_rows,
                "missing_records": found.missing,
                "unexpected_rows": found.unexpected,
                "consumed_offsets": {str(p): o for p, o in sorted(found.consumed.items())},
            },
        )

    @dg.asset_check(
        asset=asset_name,
        name="one_row_per_key",
        description=f"No key ({', '.join(key)}) appears twice in {asset_name}.",
    )
    def one_row_per_key(spark: SparkResource, lakehouse: LakehouseResource) -> dg.AssetCheckResult:
        duplicates = count_duplicate_keys(spark.get_session(), lakehouse.table_path(asset_name), key)
        return dg.AssetCheckResult(passed=duplicates == 0, metadata={"duplicated_keys": duplicates})

    return [reconciles, one_row_per_key]
