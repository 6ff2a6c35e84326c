"""The dead-letter table: Kafka records of any source that could not be decoded, with their raw bytes."""

from collections.abc import Sequence

import dagster as dg

from streaming_pipeline.asset_metadata import SPARK_KINDS, delta_table_metadata, step_priority, table_args
from streaming_pipeline.components.kafka_delta_source import declared_sources
from streaming_pipeline.engine.delta_tables import read_table, table_exists
from streaming_pipeline.resources import LakehouseResource, SparkResource
from streaming_pipeline.settings import LiveSettings
from streaming_pipeline.sources import SourceTopic
from streaming_pipeline.tables import DEAD_LETTER_RECORDS


def dead_letter_asset(sources: Sequence[SourceTopic], live: LiveSettings) -> dg.AssetsDefinition:
    """The dead-letter table's asset, downstream of the bronze table of each source, for the live mode `live`."""

    @dg.asset(
        name=DEAD_LETTER_RECORDS.name,
        **table_args(DEAD_LETTER_RECORDS, kinds=SPARK_KINDS, live=live, deps=[s.bronze_table for s in sources]),
        op_tags=step_priority(10),
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

    return dead_letter_records


@dg.definitions
def defs(context: dg.ComponentLoadContext) -> dg.Definitions:
    return dg.Definitions(assets=[dead_letter_asset(declared_sources(context.component_tree), LiveSettings.from_env())])
