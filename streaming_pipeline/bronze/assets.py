"""Bronze assets: Kafka topics -> Delta, exactly once, undecodable records to dead letters."""

from typing import TYPE_CHECKING

import dagster as dg

from streaming_pipeline.asset_metadata import (
    KAFKA_KINDS,
    SPARK_KINDS,
    checkpoint_pool,
    delta_table_metadata,
    step_priority,
    table_args,
)
from streaming_pipeline.bronze.ingestion import BronzeRunResult, ingest_topic
from streaming_pipeline.bronze.offsets import consumed_offsets
from streaming_pipeline.engine.delta_tables import read_table, table_exists
from streaming_pipeline.engine.spark import SparkResource
from streaming_pipeline.resources import KafkaResource, LakehouseResource, SchemaRegistryResource
from streaming_pipeline.settings import PICKUPS_TOPIC, RIDES_TOPIC
from streaming_pipeline.tables import DEAD_LETTER_RECORDS, RAW_PICKUP_LOCATIONS, RAW_RIDES, Table

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


def _bronze_asset(table: Table, topic: str, description: str) -> dg.AssetsDefinition:
    """The asset of a bronze table: one availableNow run of the topic's stream into it."""

    @dg.asset(
        name=table.name,
        description=description,
        **table_args(table, kinds=KAFKA_KINDS, metadata={"source_topic": topic}),
        pool=checkpoint_pool(table.name),
    )
    def bronze_table(
        context: dg.AssetExecutionContext,
        spark: SparkResource,
        kafka: KafkaResource,
        schema_registry: SchemaRegistryResource,
        lakehouse: LakehouseResource,
    ) -> dg.MaterializeResult:
        run = ingest_topic(
            spark.get_session(), kafka, schema_registry, lakehouse, topic=topic, asset_name=table.name, log=context.log
        )
        return _bronze_result(context, spark.get_session(), lakehouse, run, table.name, topic)

    return bronze_table


def _bronze_result(
    context: dg.AssetExecutionContext,
    spark: "SparkSession",
    lakehouse: LakehouseResource,
    run: BronzeRunResult,
    asset_name: str,
    topic: str,
) -> dg.MaterializeResult:
    offsets = run.kafka_offset_ranges()
    context.log.info(
        f"{asset_name}: {run.report.input_rows} Kafka records in {run.report.batches} micro-batch(es): "
        f"{run.rows_written} rows written, {run.dead_letters} dead letter(s)"
    )
    if run.dead_letters:
        context.log.warning(f"{asset_name}: {run.dead_letters} record(s) sent to {DEAD_LETTER_RECORDS.name}")
    return dg.MaterializeResult(
        metadata={
            "rows_read": dg.MetadataValue.int(run.report.input_rows),
            "rows_written": dg.MetadataValue.int(run.rows_written),
            "dead_letters": dg.MetadataValue.int(run.dead_letters),
            "micro_batches": dg.MetadataValue.int(run.report.batches),
            "streaming_seconds": dg.MetadataValue.float(round(run.report.trigger_seconds(), 3)),
            "kafka_offsets": dg.MetadataValue.json(offsets),
            "consumed_offsets": dg.MetadataValue.json(
                {str(p): o for p, o in consumed_offsets(lakehouse.table_path(asset_name), asset_name, topic).items()}
            ),
            **delta_table_metadata(spark, lakehouse.table_path(asset_name)),
        }
    )


raw_rides = _bronze_asset(
    RAW_RIDES,
    RIDES_TOPIC,
    "Every ride from the `rides` topic, decoded with its writer schema and resolved to the latest\n"
    "registered schema, with its Kafka coordinates. Exactly once across re-runs and crashes.",
)
raw_pickup_locations = _bronze_asset(
    RAW_PICKUP_LOCATIONS,
    PICKUPS_TOPIC,
    "Every pickup event from the `pickup_locations` topic with its Kafka coordinates.",
)


@dg.asset(
    name=DEAD_LETTER_RECORDS.name,
    **table_args(DEAD_LETTER_RECORDS, kinds=SPARK_KINDS, deps=[raw_rides, raw_pickup_locations]),
    op_tags=step_priority(DEAD_LETTER_RECORDS.name),
)
def dead_letter_records(
    context: dg.AssetExecutionContext, spark: SparkResource, lakehouse: LakehouseResource
) -> dg.MaterializeResult:
    """Kafka records that could not be decoded (bad magic byte, unknown schema id, corrupt body), kept
    with raw bytes and the reason. The bronze ingestion appends them in the same micro-batch as the
    good rows; this asset makes sure the table exists and reports what is in it."""
    session = spark.get_session()
    path = lakehouse.table_path(DEAD_LETTER_RECORDS.name)
    if not table_exists(path):
        session.createDataFrame([], DEAD_LETTER_RECORDS.ddl).write.format("delta").mode("append").save(path)
    from pyspark.sql import functions as F

    frame = read_table(session, path)
    by_topic = {r["kafka_topic"]: r["count"] for r in frame.groupBy("kafka_topic").count().collect()}
    by_error = frame.select(F.regexp_replace("error", r"\d+", "N").alias("reason")).groupBy("reason").count()
    context.log.info(f"dead letters per topic: {by_topic or 'none'}")
    return dg.MaterializeResult(
        metadata={
            "dead_letters_by_topic": dg.MetadataValue.json(by_topic),
            "dead_letters_by_reason": dg.MetadataValue.json({r["reason"]: r["count"] for r in by_error.collect()}),
            **delta_table_metadata(session, path, preview_order=["kafka_topic", "kafka_partition", "kafka_offset"]),
        }
    )


ASSETS = [raw_rides, raw_pickup_locations, dead_letter_records]
