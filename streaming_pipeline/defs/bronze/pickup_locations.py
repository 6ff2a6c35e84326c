"""The `pickup_locations` topic: a taxi picking up a passenger, keyed by taxi zone (declared in
`streaming_pipeline.lakehouse.tables`, which the ride-pickup join reads)."""

import dagster as dg

from streaming_pipeline.components import KafkaDeltaSource
from streaming_pipeline.lakehouse.tables import PICKUP_LOCATIONS


@dg.component_instance
def load(context: dg.ComponentLoadContext) -> KafkaDeltaSource:
    return KafkaDeltaSource.of(PICKUP_LOCATIONS, context)
