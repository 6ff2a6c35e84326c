"""Every layer's assets and asset checks as plain lists, bronze to gold (for `dg.materialize` in tools and
tests; the code location merges the layers' Definitions in `definitions.py`)."""

from streaming_pipeline.bronze import assets as bronze_assets
from streaming_pipeline.bronze import checks as bronze_checks
from streaming_pipeline.gold import assets as gold_assets
from streaming_pipeline.gold import checks as gold_checks
from streaming_pipeline.silver import assets as silver_assets
from streaming_pipeline.silver import checks as silver_checks

ALL_ASSETS = [*bronze_assets.ASSETS, *silver_assets.ASSETS, *gold_assets.ASSETS]
ALL_CHECKS = [*bronze_checks.CHECKS, *silver_checks.CHECKS, *gold_checks.CHECKS]

# For tools that run the assets with `dg.materialize` and print their own stages: the run's console log at WARNING,
# so Dagster's DEBUG lines (each step's start, output, success) stay out of the tool's output.
QUIET_RUN_CONFIG = {"loggers": {"console": {"config": {"log_level": "WARNING"}}}}
