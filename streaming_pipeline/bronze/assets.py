"""Bronze assets: Kafka topics -> Delta, exactly once, undecodable records to dead letters."""

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
from streaming_pipeline.tables import DEAD_LETTER_RECORDS, RAW_PICKUP_LOCATIONS, RAW_RIDES


def _bronze_result(
    context: dg.AssetExecutionContext,
    spark_resource: SparkResource,
    lakehouse: LakehouseResource,
    run: BronzeRunResult,
    asset_name: str,
    topic: str,
) -> dg.MaterializeResult:
    spark = spark_resource.get_session()
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


@dg.asset(
    name=RAW_RIDES.name,
    **table_args(RAW_RIDES, kinds=KAFKA_KINDS, metadata={"source_topic": RIDES_TOPIC}),
    pool=checkpoint_pool(RAW_RIDES.name),
)
def raw_rides(
    context: dg.AssetExecutionContext,
    spark: SparkResource,
    kafka: KafkaResource,
    schema_registry: SchemaRegistryResource,
    lakehouse: LakehouseResource,
) -> dg.MaterializeResult:
    """Every ride from the `rides` topic, decoded with its writer schema and resolved to the latest
    registered schema, with its Kafka coordinates. Exactly once across re-runs and crashes."""
    run = ingest_topic(
        spark.get_session(),
        kafka,
        schema_registry,
        lakehouse,
        topic=RIDES_TOPIC,
        asset_name=RAW_RIDES.name,
        log=context.log,
    )
    return _bronze_result(context, spark, lakehouse, run, RAW_RIDES.name, RIDES_TOPIC)


@dg.asset(
    name=RAW_PICKUP_LOCATIONS.name,
    **table_args(RAW_PICKUP_LOCATIONS, kinds=KAFKA_KINDS, metadata={"source_topic": PICKUPS_TOPIC}),
    pool=checkpoint_pool(RAW_PICKUP_LOCATIONS.name),
)
def raw_pickup_locations(
    context: dg.AssetExecutionContext,
    spark: SparkResource,
    kafka: KafkaResource,
    schema_registry: SchemaRegistryResource,
    lakehouse: LakehouseResource,
) -> dg.MaterializeResult:
    """Every pickup event from the `pickup_locations` topic with its Kafka coordinates."""
    run = ingest_topic(
        spark.get_session(),
        kafka,
        schema_registry,
        lakehouse,
        topic=PICKUPS_TOPIC,
        asset_name=RAW_PICKUP_LOCATIONS.name,
        log=context.log,
    )
    return _bronze_result(context, spark, lakehouse, run, RAW_PICKUP_LOCATIONS.name, PICKUPS_TOPIC)


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
