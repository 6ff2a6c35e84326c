"""The `taxi_zones` table topic: the TLC zone lookup keyed by zone id, its table the latest value per key and its
history every version (declared in `streaming_pipeline.lakehouse.tables`, which the enrichment reads)."""

import dagster as dg

from streaming_pipeline.components import KafkaDeltaSource
from streaming_pipeline.lakehouse.tables import TAXI_ZONE_LOOKUP


@dg.component_instance
def load(context: dg.ComponentLoadContext) -> KafkaDeltaSource:
    return KafkaDeltaSource.of(TAXI_ZONE_LOOKUP, context)
