"""The `rides` topic: NYC yellow-taxi trips, keyed by vendor (declared in `streaming_pipeline.lakehouse.tables`,
which the silver and gold tables read)."""

import dagster as dg

from streaming_pipeline.components import KafkaDeltaSource
from streaming_pipeline.lakehouse.tables import RIDES


@dg.component_instance
def load(context: dg.ComponentLoadContext) -> KafkaDeltaSource:
    return KafkaDeltaSource.of(RIDES, context)
