"""The check that rides_enriched (`rides_enriched/defs.yaml`) holds each ride of raw_rides once."""

import dagster as dg

from streaming_pipeline.components.asset_metadata import position_against_raw_rides
from streaming_pipeline.lakehouse.engine.delta_tables import count_duplicate_keys, count_rows
from streaming_pipeline.lakehouse.tables import KAFKA_KEY, RAW_RIDES
from streaming_pipeline.resources import LakehouseResource, SparkResource

RIDES_ENRICHED = "rides_enriched"


@dg.asset_check(
    asset=RIDES_ENRICHED,
    additional_deps=[RAW_RIDES.name],
    description="rides_enriched has one row per ride of raw_rides, no more, no fewer (of the raw_rides version the "
    "enrichment query had read when it wrote them).",
)
def enriched_rows_equal_raw_rows(spark: SparkResource, lakehouse: LakehouseResource) -> dg.AssetCheckResult:
    session = spark.get_session()
    position = position_against_raw_rides(session, lakehouse, RIDES_ENRICHED, empty_metadata={"rides_enriched_rows": 0})
    if isinstance(position, dg.AssetCheckResult):
        return position
    path = lakehouse.table_path(RIDES_ENRICHED)
    enriched = count_rows(session, path, version=position.table_version)
    rides = count_rows(session, lakehouse.table_path(RAW_RIDES.name), version=position.source_version)
    duplicates = count_duplicate_keys(session, path, KAFKA_KEY)
    return dg.AssetCheckResult(
        passed=enriched == rides and duplicates == 0,
        metadata={
            "rides_enriched_rows": enriched,
            "raw_rides_rows": rides,
            "duplicated_keys": duplicates,
            "rides_enriched_version": position.table_version,
            "raw_rides_version": position.source_version,
        },
    )
