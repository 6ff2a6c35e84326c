"""The silver layer's Definitions: its assets and checks."""

import dagster as dg

from streaming_pipeline.silver.assets import ASSETS
from streaming_pipeline.silver.checks import CHECKS

defs = dg.Definitions(assets=ASSETS, asset_checks=CHECKS)
