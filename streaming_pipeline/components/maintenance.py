"""Delta table maintenance: a job with one op per lakehouse table (OPTIMIZE, VACUUM, the log's newest checkpoint),
run daily by a schedule, each op in the concurrency pool of the stream that writes its table (docs/maintenance.md).
A project's first source brings it, for every table of the project's sources and streaming tables.

The pools are what keeps OPTIMIZE away from a stream that MERGEs or overwrites the same table: the instance's
dagster.yaml admits one step per pool at a time, so a table's maintenance op waits until no live step holds the
pool of its writer, and the writer's next step waits while it works. The results of each table are an asset
observation (files, bytes and versions before and after, the files VACUUM deleted), shown in the asset's events.
"""

from collections.abc import Sequence

import dagster as dg
from pydantic import Field, field_validator

from streaming_pipeline.components.asset_metadata import checkpoint_pool
from streaming_pipeline.components.streamed_table import StreamedTable, declared_tables, writing_steps
from streaming_pipeline.lakehouse.engine.delta_tables import table_exists
from streaming_pipeline.lakehouse.engine.maintenance import (
    MaintenanceResult,
    check_retention,
    maintain_table,
)
from streaming_pipeline.lakehouse.settings import DEFAULT_VACUUM_RETENTION_HOURS, MaintenanceSettings
from streaming_pipeline.lakehouse.sources import SourceTopic
from streaming_pipeline.resources import LakehouseResource, SparkResource

MAINTENANCE_JOB = "table_maintenance_job"
MAINTENANCE_SCHEDULE = "table_maintenance_schedule"


def op_name(table: str) -> str:
    return f"maintain_{table}"


class MaintenanceConfig(dg.Config):
    vacuum_retention_hours: float = Field(
        default=DEFAULT_VACUUM_RETENTION_HOURS,
        description="Hours of history VACUUM keeps, at least 168 (the job's default: DELTA_VACUUM_RETENTION_HOURS, "
        "else 168).",
    )

    @field_validator("vacuum_retention_hours")
    @classmethod
    def _at_least_the_minimum(cls, value: float) -> float:
        return check_retention(value, what="vacuum_retention_hours")


def observation_metadata(result: MaintenanceResult) -> dict[str, dg.MetadataValue]:
    """The figures of a maintenance pass as the metadata of the table's asset observation."""
    checkpoint = (
        dg.MetadataValue.int(result.checkpoint_version)
        if result.checkpoint_version is not None
        else dg.MetadataValue.text("none yet")
    )
    return {
        "table_path": dg.MetadataValue.path(result.path),
        "files_before": dg.MetadataValue.int(result.files_before),
        "files_after": dg.MetadataValue.int(result.files_after),
        "bytes_before": dg.MetadataValue.int(result.bytes_before),
        "bytes_after": dg.MetadataValue.int(result.bytes_after),
        "delta_version_before": dg.MetadataValue.int(result.version_before),
        "delta_version_after": dg.MetadataValue.int(result.version_after),
        "vacuumed_files": dg.MetadataValue.int(result.vacuumed_files),
        "vacuum_retention_hours": dg.MetadataValue.float(result.vacuum_retention_hours),
        "checkpoint_version": checkpoint,
        "commits_after_checkpoint": dg.MetadataValue.int(result.checkpoint_lag),
        "checkpoint_overdue": dg.MetadataValue.bool(result.checkpoint_overdue),
        "seconds": dg.MetadataValue.float(result.seconds),
        "summary": dg.MetadataValue.text(result.summary()),
    }


def maintenance_op(table: str, writer: str | None) -> dg.OpDefinition:
    """The op that maintains `table`, in the pool of `writer`, the streaming step that writes it (None: no pool, for
    a table no query streams to, `streamed_table.writing_steps`)."""

    @dg.op(
        name=op_name(table),
        description=f"OPTIMIZE and VACUUM {table}; skipped while the table does not exist.",
        pool=checkpoint_pool(writer) if writer else None,
        tags={"table": table},
        out=dg.Out(dg.Nothing),
    )
    def maintain(
        context: dg.OpExecutionContext, config: MaintenanceConfig, spark: SparkResource, lakehouse: LakehouseResource
    ) -> None:
        path = lakehouse.table_path(table)
        if not table_exists(path):
            context.log.info(f"{table}: not created yet ({path}), nothing to maintain")
            return
        result = maintain_table(spark.get_session(), path, vacuum_retention_hours=config.vacuum_retention_hours)
        context.log.info(f"{table}: {result.summary()}")
        context.log_event(dg.AssetObservation(asset_key=table, metadata=observation_metadata(result)))

    return maintain


def maintenance_definitions(
    sources: Sequence[SourceTopic], steps: Sequence[StreamedTable], settings: MaintenanceSettings
) -> dg.Definitions:
    """The maintenance job, one op per table of the lakehouse (each source's bronze table, then `tables`, then any
    table a step writes that `tables` does not declare), each in the pool of the step that writes it, and its
    schedule."""
    writers = writing_steps(sources, steps)
    names = declared_tables(sources, steps)
    ops = [maintenance_op(table, writers.get(table)) for table in names]
    retention = MaintenanceConfig(vacuum_retention_hours=settings.vacuum_retention_hours)

    @dg.job(
        name=MAINTENANCE_JOB,
        config=dg.RunConfig(ops={op.name: retention for op in ops}),
        description="OPTIMIZE and VACUUM every Delta table of the lakehouse, each in the pool of the stream that "
        "writes it, and report the newest checkpoint of its log (docs/maintenance.md).",
        tags={"streaming-pipeline/maintenance": "true"},
    )
    def table_maintenance_job() -> None:
        for op in ops:
            op()

    schedule = dg.ScheduleDefinition(
        name=MAINTENANCE_SCHEDULE,
        job=table_maintenance_job,
        cron_schedule=settings.cron_schedule,
        execution_timezone="UTC",
        default_status=dg.DefaultScheduleStatus.RUNNING,
        description="Runs table_maintenance_job (TABLE_MAINTENANCE_CRON, default daily at 03:00 UTC).",
    )
    return dg.Definitions(jobs=[table_maintenance_job], schedules=[schedule])
