"""This project's live jobs under the names they had until 0.9.0 (`raw_rides_to_gold_job`,
`raw_pickup_locations_to_gold_job`): the same assets as `<table>_downstream_job`, kept until 0.11.0 for the scripts
that launch them and for re-executing a run of the history. Delete this module then."""

from collections.abc import Sequence

import dagster as dg

from streaming_pipeline.components.kafka_delta_source.assets import live_job_checks
from streaming_pipeline.components.kafka_delta_source.sensors import downstream_job, live_job_names
from streaming_pipeline.components.streamed_table import (
    StreamedTable,
    streamed_tables,
)
from streaming_pipeline.lakehouse.sources import SourceTopic
from streaming_pipeline.lakehouse.tables import PICKUP_LOCATIONS, RIDES


def _renamed(source: SourceTopic, steps: Sequence[StreamedTable]) -> "dg.UnresolvedAssetJobDefinition":
    bronze_table = source.bronze_table
    new, old = live_job_names(dg.AssetKey(bronze_table))
    description = f"Deprecated: {new} under its name until 0.9.0, removed in 0.11.0. Launch {new} instead."
    return downstream_job(old, dg.AssetKey(bronze_table), description, live_job_checks(source, steps))


@dg.definitions
def defs(context: dg.ComponentLoadContext) -> dg.Definitions:
    steps = streamed_tables(context.component_tree)
    return dg.Definitions(jobs=[_renamed(source, steps) for source in (RIDES, PICKUP_LOCATIONS)])
