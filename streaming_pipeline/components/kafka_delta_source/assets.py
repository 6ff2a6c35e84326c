"""Bronze: what a source's declaration (`streaming_pipeline.components.KafkaDeltaSource`) builds: its asset, its
checks, its live job and its offset sensor; and the dead-letter table's asset, which the sources share. Adding a
topic adds none of these by hand."""

from collections.abc import Iterator, Sequence
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
from streaming_pipeline.components.expectation_checks import (
    check_specs,
    expectation_checks,
    expectation_metadata,
    source_check_keys,
)
from streaming_pipeline.components.kafka_delta_source.checks import bronze_checks
from streaming_pipeline.components.kafka_delta_source.sensors import build_offset_sensor, live_job
from streaming_pipeline.components.streamed_table import StreamedTable, expectation_check_keys, tables_downstream_of
from streaming_pipeline.lakehouse.bronze.ingestion import BronzeRunResult, ingest_topic
from streaming_pipeline.lakehouse.bronze.offsets import consumed_offsets
from streaming_pipeline.lakehouse.bronze.table_batches import marker_counts
from streaming_pipeline.lakehouse.engine.delta_tables import create_if_missing, read_table
from streaming_pipeline.lakehouse.expectations import ExpectationCounts, counts_of_observed
from streaming_pipeline.lakehouse.settings import LiveSettings, SensorSettings
from streaming_pipeline.lakehouse.sources import SourceTopic
from streaming_pipeline.lakehouse.tables import DEAD_LETTER_RECORDS, KAFKA_KEY, Table
from streaming_pipeline.resources import KafkaResource, LakehouseResource, SchemaRegistryResource, SparkResource
from streaming_pipeline.resources.lakehouse import naming_a_store_gone_away

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


def bronze_asset(source: SourceTopic, live: LiveSettings) -> dg.AssetsDefinition:
    """The asset of a source's bronze table: one availableNow run of the topic's stream into it. A table topic with
    history writes its history table in the same run, a source with `drop` rules its quarantine table: they are one
    multi-asset, with a check per rule of the source."""
    table, topic, history, quarantine = source.table, source.topic, source.history_table, source.quarantine
    rules = source.expectations
    args = table_args(table, kinds=KAFKA_KINDS, live=live, metadata={"source_topic": topic})

    def run(
        context: dg.AssetExecutionContext,
        spark: SparkResource,
        kafka: KafkaResource,
        schema_registry: SchemaRegistryResource,
        lakehouse: LakehouseResource,
    ) -> Iterator[dg.MaterializeResult | dg.AssetCheckResult]:
        session = spark.get_session()
        ingested = ingest_topic(session, kafka, schema_registry, lakehouse, source=source, log=context.log)
        counts = counts_of_observed([b.marker.get("expectations") for b in ingested.batches], rules)
        yield _bronze_result(context, session, lakehouse, ingested, source, counts)
        if history is not None:
            yield _history_result(session, lakehouse, ingested, source, history)
        if quarantine is not None:
            yield dg.MaterializeResult(
                asset_key=quarantine.name,
                metadata={
                    "rows_quarantined": dg.MetadataValue.int(counts.dropped),
                    **delta_table_metadata(session, lakehouse, quarantine),
                },
            )
        yield from expectation_checks(table.name, counts, rules)

    if history is None and not rules:

        @dg.asset(name=table.name, description=source.description, **args, pool=checkpoint_pool(table.name))
        @naming_a_store_gone_away
        def bronze_table(
            context: dg.AssetExecutionContext,
            spark: SparkResource,
            kafka: KafkaResource,
            schema_registry: SchemaRegistryResource,
            lakehouse: LakehouseResource,
        ) -> dg.MaterializeResult:
            result = next(run(context, spark, kafka, schema_registry, lakehouse))
            assert isinstance(result, dg.MaterializeResult)
            return result

        return bronze_table

    specs = [dg.AssetSpec(table.name, description=source.description, **args)]
    if history is not None:
        history_args = table_args(history, kinds=KAFKA_KINDS, live=live, metadata={"source_topic": topic})
        history_args["deps"] = [table.name]
        specs.append(
            dg.AssetSpec(
                history.name,
                description=f"Every version of each key of the `{topic}` table topic (SCD type 2): valid from its "
                "record (valid_from) until the next record of its key, a new value or a tombstone (valid_to); "
                "is_current for the key's current version. Written by the same run as the table.",
                **history_args,
            )
        )
    if quarantine is not None:
        quarantine_args = table_args(quarantine, kinds=KAFKA_KINDS, live=live, metadata={"source_topic": topic})
        quarantine_args["deps"] = [table.name]
        dropping = ", ".join(f"{r.name} ({r.constraint})" for r in rules if r.on_violation == "drop")
        specs.append(
            dg.AssetSpec(
                quarantine.name,
                description=f"The records of `{topic}` that broke a `drop` rule of {table.name} ({dropping}), "
                "decoded, with the rules each broke, the micro-batch and when, set aside instead of written to "
                f"{table.name}. Written by the same run as the table.",
                **quarantine_args,
            )
        )

    @dg.multi_asset(
        name=table.name, specs=specs, check_specs=check_specs(table.name, rules), pool=checkpoint_pool(table.name)
    )
    @naming_a_store_gone_away
    def bronze_tables(
        context: dg.AssetExecutionContext,
        spark: SparkResource,
        kafka: KafkaResource,
        schema_registry: SchemaRegistryResource,
        lakehouse: LakehouseResource,
    ) -> Iterator[dg.MaterializeResult | dg.AssetCheckResult]:
        yield from run(context, spark, kafka, schema_registry, lakehouse)

    return bronze_tables


def _bronze_result(
    context: dg.AssetExecutionContext,
    spark: "SparkSession",
    lakehouse: LakehouseResource,
    run: BronzeRunResult,
    source: SourceTopic,
    counts: ExpectationCounts,
) -> dg.MaterializeResult:
    table, topic = source.table, source.topic
    asset_name, offsets = table.name, run.kafka_offset_ranges()
    deleted = f", {run.rows_deleted} deleted" if source.is_table_topic else ""
    context.log.info(
        f"{asset_name}: {run.report.input_rows} Kafka records in {run.report.batches} micro-batch(es): "
        f"{run.rows_written} rows written{deleted}, {run.dead_letters} dead letter(s)"
    )
    if run.dead_letters:
        context.log.warning(f"{asset_name}: {run.dead_letters} record(s) sent to {DEAD_LETTER_RECORDS.name}")
    table_topic_counts = {"rows_deleted": dg.MetadataValue.int(run.rows_deleted)} if source.is_table_topic else {}
    return dg.MaterializeResult(
        asset_key=asset_name,
        metadata={
            **stream_metadata(run.report),
            "rows_written": dg.MetadataValue.int(run.rows_written),
            **table_topic_counts,
            "dead_letters": dg.MetadataValue.int(run.dead_letters),
            **expectation_metadata(counts, source.expectations),
            "kafka_offsets": dg.MetadataValue.json(offsets),
            "consumed_offsets": dg.MetadataValue.json(
                {
                    str(p): o
                    for p, o in consumed_offsets(
                        lakehouse.table_path(asset_name), lakehouse.checkpoint_path(asset_name), asset_name, topic
                    ).items()
                }
            ),
            # A table topic's table stays as small as its keys: its preview is sorted by them.
            **delta_table_metadata(
                spark,
                lakehouse,
                table,
                preview_order=[c.name for c in source.key_columns] if source.is_table_topic else None,
            ),
        },
    )


def _history_result(
    spark: "SparkSession", lakehouse: LakehouseResource, run: BronzeRunResult, source: SourceTopic, history: Table
) -> dg.MaterializeResult:
    markers = [b.marker for b in run.batches]
    return dg.MaterializeResult(
        asset_key=history.name,
        metadata={
            "versions_inserted": dg.MetadataValue.int(marker_counts(markers, "versions_inserted")),
            "versions_closed": dg.MetadataValue.int(marker_counts(markers, "versions_closed")),
            **delta_table_metadata(spark, lakehouse, history),
        },
    )


def source_definitions(
    source: SourceTopic,
    policy: SensorSettings,
    live: LiveSettings,
    fast_run: Sequence[str],
    steps: Sequence[StreamedTable] = (),
) -> dg.Definitions:
    """Everything Dagster knows of one source topic: its bronze asset and checks, its live job and offset sensor
    (`fast_run`: the tables of its fast runs, `streamed_table.fast_run_tables`; `steps`: the project's streaming
    tables, whose expectations' checks the runs of those downstream evaluate)."""
    key = dg.AssetKey(source.bronze_table)
    own = source_check_keys(source)
    job = live_job(key, live_job_checks(source, steps))
    return dg.Definitions(
        assets=[bronze_asset(source, live)],
        asset_checks=bronze_checks(source),
        jobs=[job],
        sensors=[
            build_offset_sensor(
                key,
                source.topic,
                job,
                policy,
                fast_run,
                running_by_default=not live.continuous,
                table_topic=source.is_table_topic,
                fast_run_checks=[*own, *expectation_check_keys(fast_run, steps)],
            )
        ],
    )


def live_job_checks(source: SourceTopic, steps: Sequence[StreamedTable]) -> list[dg.AssetCheckKey]:
    """The checks a run of the source's live job evaluates on the rows it writes: its own expectations', and those
    of every streaming table downstream of it (a job that runs a table's step selects them with its asset)."""
    downstream = tables_downstream_of(source.bronze_table, steps)
    return [*source_check_keys(source), *expectation_check_keys(downstream, steps)]


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
        create_if_missing(session, path, DEAD_LETTER_RECORDS.ddl)  # each source's runs have this step
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
