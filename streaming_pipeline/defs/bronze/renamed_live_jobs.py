"""This project's live jobs under the names they had until 0.9.0 (`raw_rides_to_gold_job`,
`raw_pickup_locations_to_gold_job`): the same assets as `<table>_downstream_job`, kept until 0.11.0 for the scripts
that launch them and for re-executing a run of the history. Delete this module then."""

from collections.abc import Sequence

import dagster as dg

from streaming_pipeline.components.expectation_checks import source_check_keys
from streaming_pipeline.components.kafka_delta_source.sensors import downstream_job, live_job_names
from streaming_pipeline.components.streamed_table import (
    StreamedTable,
    expectation_check_keys,
    streamed_tables,
    tables_downstream_of,
)
from streaming_pipeline.lakehouse.sources import SourceTopic
from streaming_pipeline.lakehouse.tables import PICKUP_LOCATIONS, RIDES


def _renamed(source: SourceTopic, steps: Sequence[StreamedTable]) -> "dg.UnresolvedAssetJobDefinition":
    bronze_table = source.bronze_table
    new, old = live_job_names(dg.AssetKey(bronze_table))
    description = f"Deprecated: {new} under its name until 0.9.0, removed in 0.11.0. Launch {new} instead."
    checks = [*source_check_keys(source), *expectation_check_keys(tables_downstream_of(bronze_table, steps), steps)]
    return downstream_job(old, dg.AssetKey(bronze_table), description, checks)


@dg.definitions
def defs(context: dg.ComponentLoadContext) -> dg.Definitions:
    steps = streamed_tables(context.component_tree)
    return dg.Definitions(jobs=[_renamed(source, steps) for source in (RIDES, PICKUP_LOCATIONS)])
