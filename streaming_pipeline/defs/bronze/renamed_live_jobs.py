"""This project's live jobs under the names they had until 0.9.0 (`raw_rides_to_gold_job`,
`raw_pickup_locations_to_gold_job`): the same assets as `<table>_downstream_job`, kept until 0.11.0 for the scripts
that launch them and for re-executing a run of the history. Delete this module then."""

from __future__ import annotations

import dagster as dg

from streaming_pipeline.components.kafka_delta_source.sensors import downstream_job, live_job_names
from streaming_pipeline.lakehouse.tables import PICKUP_LOCATIONS, RIDES


def _renamed(bronze_table: str) -> dg.UnresolvedAssetJobDefinition:
    new, old = live_job_names(dg.AssetKey(bronze_table))
    description = f"Deprecated: {new} under its name until 0.9.0, removed in 0.11.0. Launch {new} instead."
    return downstream_job(old, dg.AssetKey(bronze_table), description)


defs = dg.Definitions(jobs=[_renamed(source.bronze_table) for source in (RIDES, PICKUP_LOCATIONS)])
