"""Dagster's automation sensor, shipped running, so that a bronze run started by hand still propagates downstream
(the streaming tables are eager on their sources) and a missing taxi_zones table is loaded. In continuous mode the
continuous run streams every table, and the sensor only loads taxi_zones."""

import dagster as dg

from streaming_pipeline.settings import LiveSettings, SensorSettings
from streaming_pipeline.tables import TAXI_ZONES

default_automation_condition_sensor = dg.AutomationConditionSensorDefinition(
    "default_automation_condition_sensor",
    target=dg.AssetSelection.assets(TAXI_ZONES.name) if LiveSettings.from_env().continuous else dg.AssetSelection.all(),
    default_status=dg.DefaultSensorStatus.RUNNING,
    minimum_interval_seconds=SensorSettings.from_env().interval_seconds * 5,
    emit_backfills=False,
)
