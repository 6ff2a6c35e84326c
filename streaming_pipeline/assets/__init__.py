"""Dagster software-defined assets: one per Delta table."""

from streaming_pipeline.assets.branching import amount_branches
from streaming_pipeline.assets.bronze import dead_letter_records, raw_pickup_locations, raw_rides
from streaming_pipeline.assets.enrichment import rides_enriched, taxi_zones
from streaming_pipeline.assets.silver_gold import ride_pickup_joins, ride_window_aggregates, vendor_counts

ALL_ASSETS = [
    raw_rides,
    raw_pickup_locations,
    dead_letter_records,
    vendor_counts,
    ride_window_aggregates,
    ride_pickup_joins,
    amount_branches,
    taxi_zones,
    rides_enriched,
]

__all__ = [
    "ALL_ASSETS",
    "amount_branches",
    "dead_letter_records",
    "raw_pickup_locations",
    "raw_rides",
    "ride_pickup_joins",
    "ride_window_aggregates",
    "rides_enriched",
    "taxi_zones",
    "vendor_counts",
]
