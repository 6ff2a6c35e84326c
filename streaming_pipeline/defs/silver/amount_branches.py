"""The amount branches (the course's Faust app): one stream from raw_rides into high_amount_rides and
low_amount_rides, and the check that they add up."""

import dagster as dg

from streaming_pipeline.components.asset_metadata import (
    delta_table_metadata,
    missing_table_result,
    stream_metadata,
    unpinned_check_result,
)
from streaming_pipeline.components.parameters import parameter
from streaming_pipeline.components.streamed_table import QueryInputs, StepRun, StreamedTable, WrittenTable
from streaming_pipeline.lakehouse.engine.delta_tables import count_duplicate_keys, count_rows, table_exists
from streaming_pipeline.lakehouse.engine.row_filters import not_null
from streaming_pipeline.lakehouse.engine.streams import StreamQuery
from streaming_pipeline.lakehouse.silver.branches import AmountBranches
from streaming_pipeline.lakehouse.table_model import SILVER, Table
from streaming_pipeline.lakehouse.tables import KAFKA_KEY, RAW_RIDES, RIDE_COLUMNS
from streaming_pipeline.resources import LakehouseResource, SparkResource

HIGH_AMOUNT_RIDES = Table("high_amount_rides", SILVER, RIDE_COLUMNS)
LOW_AMOUNT_RIDES = Table("low_amount_rides", SILVER, RIDE_COLUMNS)
#: The step (multi-asset) that writes both branches from one stream.
AMOUNT_BRANCHES = "amount_branches"
BRANCHES = AmountBranches(source=RAW_RIDES.name, high=HIGH_AMOUNT_RIDES.name, low=LOW_AMOUNT_RIDES.name)


class AmountBranchesConfig(dg.Config):
    high_amount_threshold: float = parameter(
        env="HIGH_AMOUNT_THRESHOLD",
        default=40.0,
        kind="number",
        description="A ride with `total_amount` at or above it is a high amount",
    )


def branches_query(inputs: QueryInputs, config: AmountBranchesConfig) -> StreamQuery:
    return BRANCHES.query(inputs.spark, inputs.lakehouse, name=AMOUNT_BRANCHES, threshold=config.high_amount_threshold)


def branched_rides(step: StepRun):
    """One stream from raw_rides, branched per micro-batch; a ride with no total_amount goes to neither table
    and is counted. Exactly once: both appends are idempotent per micro-batch."""
    result = BRANCHES.writes(step.lakehouse, step.run)
    step.context.log.info(
        f"{result.report.input_rows} rides: {result.high_rows} high, {result.low_rows} low, "
        f"{result.null_amount_rides} with no total_amount (in neither)"
    )
    common = {
        **stream_metadata(result.report),
        "threshold": dg.MetadataValue.float(step.config.high_amount_threshold),
        "null_amount_rides": dg.MetadataValue.int(result.null_amount_rides),
    }
    for table, written in ((HIGH_AMOUNT_RIDES, result.high_rows), (LOW_AMOUNT_RIDES, result.low_rows)):
        yield dg.MaterializeResult(
            asset_key=table.name,
            metadata={
                **common,
                "rows_written": dg.MetadataValue.int(written),
                **delta_table_metadata(step.spark, step.lakehouse, table),
            },
        )


@dg.component_instance
def load(context: dg.ComponentLoadContext) -> StreamedTable:
    return StreamedTable(
        step=AMOUNT_BRANCHES,
        writes=[
            WrittenTable(
                HIGH_AMOUNT_RIDES,
                "Rides with total_amount >= the threshold (config high_amount_threshold), same columns as raw_rides.",
            ),
            WrittenTable(
                LOW_AMOUNT_RIDES,
                "Rides with total_amount < the threshold (config high_amount_threshold), same columns as raw_rides.",
            ),
        ],
        reads=[RAW_RIDES],
        query=branches_query,
        compute=branched_rides,
        config=AmountBranchesConfig,
        priority=30,
    )


@dg.asset_check(
    asset=HIGH_AMOUNT_RIDES.name,
    additional_deps=[LOW_AMOUNT_RIDES.name, RAW_RIDES.name],
    description="high_amount_rides + low_amount_rides hold each ride of raw_rides with a total_amount exactly once "
    "(of the raw_rides version the branch query had read when it wrote them).",
)
def branches_add_up_to_rides_with_an_amount(spark: SparkResource, lakehouse: LakehouseResource) -> dg.AssetCheckResult:
    session = spark.get_session()
    high_path, low_path = lakehouse.table_path(HIGH_AMOUNT_RIDES.name), lakehouse.table_path(LOW_AMOUNT_RIDES.name)
    rides_path = lakehouse.table_path(RAW_RIDES.name)
    with_amount = not_null("total_amount")
    duplicates = count_duplicate_keys(session, high_path, KAFKA_KEY) + count_duplicate_keys(
        session, low_path, KAFKA_KEY
    )
    if not (table_exists(high_path) or table_exists(low_path)):
        rides = count_rows(session, rides_path, with_amount)
        return missing_table_result(
            f"{HIGH_AMOUNT_RIDES.name} and {LOW_AMOUNT_RIDES.name}",
            BRANCHES.checkpoint(lakehouse),
            rides,
            {"high": 0, "low": 0, "raw_rides_with_amount": rides, "duplicated_keys": 0},
        )
    position = BRANCHES.position(lakehouse)
    if position is None or position.high_version is None:
        return unpinned_check_result(LOW_AMOUNT_RIDES.name if position is None else HIGH_AMOUNT_RIDES.name)
    high = count_rows(session, high_path, version=position.high_version)
    low = count_rows(session, low_path, version=position.low_version)
    rides = count_rows(session, rides_path, with_amount, version=position.raw_rides_version)
    return dg.AssetCheckResult(
        passed=high + low == rides and duplicates == 0,
        metadata={
            "high": high,
            "low": low,
            "raw_rides_with_amount": rides,
            "duplicated_keys": duplicates,
            "raw_rides_version": position.raw_rides_version,
        },
    )
