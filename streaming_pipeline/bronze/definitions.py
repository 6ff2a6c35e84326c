"""The bronze layer's Definitions: its assets and checks, the live jobs and the offset sensors that start them."""

import dagster as dg

from streaming_pipeline.bronze.assets import ASSETS
from streaming_pipeline.bronze.checks import CHECKS
from streaming_pipeline.bronze.sensors import build_live_jobs_and_sensors
from streaming_pipeline.settings import SensorSettings


def bronze_definitions(sensor_settings: SensorSettings) -> dg.Definitions:
    jobs, sensors = build_live_jobs_and_sensors(sensor_settings)
    return dg.Definitions(assets=ASSETS, asset_checks=CHECKS, jobs=jobs, sensors=sensors)
