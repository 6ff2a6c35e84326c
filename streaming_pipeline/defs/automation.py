"""Dagster's automation sensor, shipped running, so that a bronze run started by hand still propagates downstream
(the streaming tables are eager on their sources, in triggered mode: `asset_metadata.table_args`) and a missing
taxi_zones table is loaded. It targets every asset, so that Dagster adds no default automation sensor of its own."""

import dagster as dg

from streaming_pipeline.lakehouse.settings import SensorSettings


@dg.definitions
def defs() -> dg.Definitions:
    """Read when the definitions load: the sensors' interval (OFFSET_SENSOR_INTERVAL_SECONDS)."""
    sensor = dg.AutomationConditionSensorDefinition(
        "default_automation_condition_sensor",
        target=dg.AssetSelection.all(),
        default_status=dg.DefaultSensorStatus.RUNNING,
        minimum_interval_seconds=SensorSettings.from_env().interval_seconds * 5,
        emit_backfills=False,
    )
    return dg.Definitions(sensors=[sensor])
