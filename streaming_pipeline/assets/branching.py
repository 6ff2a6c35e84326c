"""Branching (the course's Faust app): raw_rides split by total_amount into two silver tables, in one stream."""

import dagster as dg

from streaming_pipeline.assets import tables
from streaming_pipeline.assets.bronze import raw_rides
from streaming_pipeline.assets.metadata import (
    OWNERS,
    SharedSpecArgs,
    checkpoint_pool,
    delta_table_metadata,
    step_priority,
)
from streaming_pipeline.delta_streams import HIGH_AMOUNT, LOW_AMOUNT, RAW_RIDES, update_amount_branches
from streaming_pipeline.delta_tables import table_exists
from streaming_pipeline.resources import LakehouseResource, SparkResource

_COMMON = SharedSpecArgs(
    group_name="silver",
    deps=[raw_rides],
    kinds={"spark", "delta"},
    owners=OWNERS,
    tags={"layer": "silver"},
    automation_condition=dg.AutomationCondition.eager(),
)


@dg.multi_asset(
    specs=[
        dg.AssetSpec(
            HIGH_AMOUNT,
            description="Rides with total_amount >= HIGH_AMOUNT_THRESHOLD (default 40), same columns as raw_rides.",
            metadata={"dagster/column_schema": tables.HIGH_AMOUNT_RIDES},
            **_COMMON,
        ),
        dg.AssetSpec(
            LOW_AMOUNT,
            description="Rides with total_amount < HIGH_AMOUNT_THRESHOLD (default 40), same columns as raw_rides.",
            metadata={"dagster/column_schema": tables.LOW_AMOUNT_RIDES},
            **_COMMON,
        ),
    ],
    pool=checkpoint_pool("amount_branches"),
    op_tags=step_priority("amount_branches"),
)
def amount_branches(context: dg.AssetExecutionContext, spark: SparkResource, lakehouse: LakehouseResource):
    """One stream from raw_rides, branched per micro-batch; a ride with no total_amount goes to neither table
    and is counted. Exactly once: both appends are idempotent per micro-batch."""
    session = spark.get_session()
    if not table_exists(lakehouse.table_path(RAW_RIDES)):
        context.log.warning("raw_rides does not exist yet: nothing to branch")
        for name in (HIGH_AMOUNT, LOW_AMOUNT):
            yield dg.MaterializeResult(asset_key=name, metadata={"skipped": "raw_rides does not exist yet"})
        return
    result = update_amount_branches(session, lakehouse, log=context.log)
    context.log.info(
        f"{result.report.input_rows} rides: {result.high_rows} high, {result.low_rows} low, "
        f"{result.null_amount_rides} with no total_amount (in neither)"
    )
    common = {
        "rows_read": dg.MetadataValue.int(result.report.input_rows),
        "micro_batches": dg.MetadataValue.int(result.report.batches),
        "threshold": dg.MetadataValue.float(lakehouse.high_amount_threshold),
        "null_amount_rides": dg.MetadataValue.int(result.null_amount_rides),
    }
    for name, written in ((HIGH_AMOUNT, result.high_rows), (LOW_AMOUNT, result.low_rows)):
        yield dg.MaterializeResult(
            asset_key=name,
            metadata={
                **common,
                "rows_written": dg.MetadataValue.int(written),
                **delta_table_metadata(session, lakehouse.table_path(name)),
            },
        )
