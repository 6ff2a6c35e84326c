"""The check that the running count of rides per vendor (`vendor_counts/defs.yaml`) adds up to raw_rides."""

import dagster as dg

from streaming_pipeline.components.asset_metadata import position_against_raw_rides
from streaming_pipeline.lakehouse.engine.delta_tables import count_rows, sum_columns
from streaming_pipeline.lakehouse.tables import RAW_RIDES
from streaming_pipeline.resources import LakehouseResource, SparkResource

VENDOR_COUNTS = "vendor_counts"


@dg.asset_check(
    asset=VENDOR_COUNTS,
    additional_deps=[RAW_RIDES.name],
    description="The vendors' trip counts add up to the rows of raw_rides they were counted from (the raw_rides "
    "version the vendor_counts query had read when it wrote them).",
)
def vendor_counts_match_raw_rides(spark: SparkResource, lakehouse: LakehouseResource) -> dg.AssetCheckResult:
    session = spark.get_session()
    position = position_against_raw_rides(session, lakehouse, VENDOR_COUNTS, empty_metadata={"sum_trip_count": 0})
    if isinstance(position, dg.AssetCheckResult):
        return position
    path = lakehouse.table_path(VENDOR_COUNTS)
    counted = sum_columns(session, path, ["trip_count"], version=position.table_version)["trip_count"]
    rides = count_rows(session, lakehouse.table_path(RAW_RIDES.name), version=position.source_version)
    return dg.AssetCheckResult(
        passed=counted == rides,
        metadata={
            "sum_trip_count": counted,
            "raw_rides_rows": rides,
            "vendor_counts_version": position.table_version,
            "raw_rides_version": position.source_version,
        },
    )
