"""The gold layer's Definitions: its assets and checks."""

import dagster as dg

from streaming_pipeline.gold.assets import ASSETS
from streaming_pipeline.gold.checks import CHECKS

defs = dg.Definitions(assets=ASSETS, asset_checks=CHECKS)
