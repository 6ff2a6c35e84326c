"""Bronze: what a source's declaration (`streaming_pipeline.components.KafkaDeltaSource`) builds: its asset, its
checks, its live job and its offset sensor; and the dead-letter table's asset, which the sources share. Adding a
topic adds none of these by hand."""

from collections.abc import Sequence
from typing import TYPE_CHECKING

import dagster as dg

from streaming_pipeline.components.asset_metadata import (
    KAFKA_KINDS,
    SPARK_KINDS,
    checkpoint_pool,
    delta_table_metadata,
    step_priority,
    stream_metadata,
    table_args,
)
from streaming_pipeline.components.kafka_delta_source.checks import bronze_checks
from streaming_pipeline.components.kafka_delta_source.sensors import build_offset_sensor, live_job
from streaming_pipeline.lakehouse.bronze.ingestion import BronzeRunResult, ingest_topic
from streaming_pipeline.lakehouse.bronze.offsets import consumed_offsets
from streaming_pipeline.lakehouse.engine.delta_tables import read_table, table_exists
from streaming_pipeline.lakehouse.settings import LiveSettings, SensorSettings
from streaming_pipeline.lakehouse.sources import SourceTopic
from streaming_pipeline.lakehouse.tables import DEAD_LETTER_RECORDS, KAFKA_KEY, Table
from streaming_pipeline.resources import KafkaResource, LakehouseResource, SchemaRegistryResource, SparkResource
from streaming_pipeline.resources.lakehouse import naming_a_store_gone_away

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


def bronze_asset(source: SourceTopic, live: LiveSettings) -> dg.AssetsDefinition:
    """The asset of a source's bronze table: one availableNow run of the topic's stream into it."""
    table, topic = source.table, source.topic

    @dg.asset(
        name=table.name,
        description=source.description,
        **table_args(table, kinds=KAFKA_KINDS, live=live, metadata={"source_topic": topic}),
        pool=checkpoint_pool(table.name),
    )
    @naming_a_store_gone_away
    def bronze_table(
        context: dg.AssetExecutionContext,
        spark: SparkResource,
        kafka: KafkaResource,
        schema_registry: SchemaRegistryResource,
        lakehouse: LakehouseResource,
    ) -> dg.MaterializeResult:
        run = ingest_topic(spark.get_session(), kafka, schema_registry, lakehouse, source=source, log=context.log)
        return _bronze_result(context, spark.get_session(), lakehouse, run, table, topic)

    return bronze_table


def _bronze_result(
    context: dg.AssetExecutionContext,
    spark: "SparkSession",
    lakehouse: LakehouseResource,
    run: BronzeRunResult,
    table: Table,
    topic: str,
) -> dg.MaterializeResult:
    asset_name, offsets = table.name, run.kafka_offset_ranges()
    context.log.info(
        f"{asset_name}: {run.report.input_rows} Kafka records in {run.report.batches} micro-batch(es): "
        f"{run.rows_written} rows written, {run.dead_letters} dead letter(s)"
    )
    if run.dead_letters:
        context.log.warning(f"{asset_name}: {run.dead_letters} record(s) sent to {DEAD_LETTER_RECORDS.name}")
    return dg.MaterializeResult(
        metadata={
            **stream_metadata(run.report),
            "rows_written": dg.MetadataValue.int(run.rows_written),
            "dead_letters": dg.MetadataValue.int(run.dead_letters),
            "kafka_offsets": dg.MetadataValue.json(offsets),
            "consumed_offsets": dg.MetadataValue.json(
                {
                    str(p): o
                    for p, o in consumed_offsets(
                        lakehouse.table_path(asset_name), lakehouse.checkpoint_path(asset_name), asset_name, topic
                    ).items()
                }
            ),
            **delta_table_metadata(spark, lakehouse, table),
        }
    )


def source_definitions(
    source: SourceTopic, policy: SensorSettings, live: LiveSettings, fast_run: Sequence[str]
) -> dg.Definitions:
    """Everything Dagster knows of one source topic: its bronze asset and checks, its live job and offset sensor
    (`fast_run`: the tables of its fast runs, `streamed_table.fast_run_tables`)."""
    key = dg.AssetKey(source.bronze_table)
    job = live_job(key)
    return dg.Definitions(
        assets=[bronze_asset(source, live)],
        asset_checks=bronze_checks(source),
        jobs=[job],
        sensors=[build_offset_sensor(key, source.topic, job, policy, fast_run, running_by_default=not live.continuous)],
    )


def dead_letter_asset(sources: Sequence[SourceTopic], live: LiveSettings) -> dg.AssetsDefinition:
    """The dead-letter table's asset, downstream of the bronze table of each source, for the live mode `live`."""

    @dg.asset(
        name=DEAD_LETTER_RECORDS.name,
        **table_args(DEAD_LETTER_RECORDS, kinds=SPARK_KINDS, live=live, deps=[s.bronze_table for s in sources]),
        op_tags=step_priority(10),
    )
    @naming_a_store_gone_away
    def dead_letter_records(
        context: dg.AssetExecutionContext, spark: SparkResource, lakehouse: LakehouseResource
    ) -> dg.MaterializeResult:
        """Kafka records that could not be decoded (bad magic byte, unknown schema id, corrupt body), kept
        with raw bytes and the reason. The bronze ingestion appends them in the same micro-batch as the
        good rows; this asset makes sure the table exists and reports what is in it."""
        session, path = spark.get_session(), lakehouse.table_path(DEAD_LETTER_RECORDS.name)
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
                **delta_table_metadata(session, lakehouse, DEAD_LETTER_RECORDS, preview_order=KAFKA_KEY),
            }
        )

    return dead_letter_records
