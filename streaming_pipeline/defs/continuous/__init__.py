"""The continuous mode (`LIVE_MODE=continuous`, docs/continuous-mode.md): one long-running run keeps every streaming
query of the pipeline running on the warm engine, and a sensor keeps that run alive.

The run's one op claims the concurrency pool of every checkpoint it streams when it starts (`CheckpointPools`), so
no second continuous run works on them meanwhile, and lends one to a step of another run that waits for it (a
manual run, table maintenance): it stops that query until the pool is back. It frees the pools when it ends, and
run monitoring frees them after a run whose process was killed. While it runs, the offset sensors stand aside. It
reports each table as an asset materialization at most every `CONTINUOUS_REPORT_SECONDS` (rows since the previous
report, the Delta version, the Kafka offsets), a table caught up with its sources now and then (so that its
freshness policy does not call an idle table late), and the consumer lag as an observation when it changed, so
that a day of streaming adds a bounded number of events. Terminating the run (UI) stops every query: the
termination is taken between two rounds of calls to the engine, never inside one (`engine.interrupts`).

The run's job and its op are in `job.py`, the sensor in `sensor.py`, what the op claims and reports in
`checkpoint_pools.py` and `table_reporter.py` (those two define nothing that loads as a definition).
"""

import dagster as dg

from streaming_pipeline.components.kafka_delta_source import declared_sources
from streaming_pipeline.components.streamed_table import streamed_tables
from streaming_pipeline.defs.continuous.job import build_continuous_job
from streaming_pipeline.defs.continuous.sensor import build_continuous_sensor
from streaming_pipeline.lakehouse.settings import LiveSettings, SensorSettings


@dg.definitions
def defs(context: dg.ComponentLoadContext) -> dg.Definitions:
    """Read when the definitions load: the project's sources and streamed tables, the sensor policy, LIVE_MODE and
    the defaults of the run's config.

    Args:
        context: dg's load context, whose component tree holds the project's sources and streamed tables.

    Returns:
        The continuous run's job and its sensor.
    """
    live, tree = LiveSettings.from_env(), context.component_tree
    job = build_continuous_job(declared_sources(tree), streamed_tables(tree), live)
    return dg.Definitions(jobs=[job], sensors=[build_continuous_sensor(job, SensorSettings.from_env(), live)])
