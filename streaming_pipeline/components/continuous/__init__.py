"""The continuous mode (`LIVE_MODE=continuous`, docs/continuous-mode.md): one long-running run keeps every streaming
query of a project running on the warm engine, and a sensor keeps that run alive. A project's first
`KafkaDeltaSource` builds both (`continuous_definitions`), for whatever sources and streaming tables it declares.

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
`checkpoint_pools.py` and `table_reporter.py`; the job and schedule that run every asset check beside it (its queries
write all the time, and materialize nothing) in `checks_schedule.py`.
"""

from collections.abc import Sequence

import dagster as dg

from streaming_pipeline.components.continuous.checks_schedule import live_checks_definitions
from streaming_pipeline.components.continuous.job import build_continuous_job
from streaming_pipeline.components.continuous.sensor import build_continuous_sensor
from streaming_pipeline.components.expectation_checks import source_check_keys
from streaming_pipeline.components.streamed_table import StreamedTable
from streaming_pipeline.lakehouse.settings import LiveSettings, SensorSettings
from streaming_pipeline.lakehouse.sources import SourceTopic


def continuous_definitions(sources: Sequence[SourceTopic], steps: Sequence[StreamedTable]) -> dg.Definitions:
    """Read when the definitions load: the sensor policy, LIVE_MODE and the defaults of the run's config.

    Args:
        sources: The project's sources, whose bronze queries the run keeps running.
        steps: The project's streaming tables, whose queries the run keeps running after them.

    Returns:
        The continuous run's job and its sensor, and the job and schedule that run every asset check beside it.
    """
    live = LiveSettings.from_env()
    job = build_continuous_job(sources, steps, live)
    return dg.Definitions.merge(
        dg.Definitions(jobs=[job], sensors=[build_continuous_sensor(job, SensorSettings.from_env(), live)]),
        live_checks_definitions(
            live,
            [
                *(key for source in sources for key in source_check_keys(source)),
                *(key for step in steps for key in step.check_keys),
            ],
        ),
    )
