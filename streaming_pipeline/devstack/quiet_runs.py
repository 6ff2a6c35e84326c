"""For tools that run the assets with `dg.materialize` and print their own stages (the demo, the bench)."""

# The run's console log at WARNING, so that Dagster's DEBUG lines (each step's start, output, success) stay out of
# the tool's output.
QUIET_RUN_CONFIG = {"loggers": {"console": {"config": {"log_level": "WARNING"}}}}
