"""What the live sensors read of Dagster's runs: which are in flight, how many of a sensor's last runs failed in a
row, and the back-off before the next retry. Shared by the offset sensors and the continuous mode's sensor."""

from __future__ import annotations

import time

import dagster as dg

from streaming_pipeline.settings import SensorSettings

#: The continuous mode's job (`defs/continuous.py`): while a run of it is in flight, the offset sensors stand aside.
CONTINUOUS_JOB = "continuous_streams_job"

IN_FLIGHT = [
    dg.DagsterRunStatus.QUEUED,
    dg.DagsterRunStatus.NOT_STARTED,
    dg.DagsterRunStatus.STARTING,
    dg.DagsterRunStatus.STARTED,
    dg.DagsterRunStatus.CANCELING,
]
FAILED = (dg.DagsterRunStatus.FAILURE, dg.DagsterRunStatus.CANCELED)


def continuous_run_in_flight(instance: dg.DagsterInstance) -> dg.DagsterRun | None:
    """The continuous mode's run that is queued or running, if any."""
    runs = instance.get_runs(filters=dg.RunsFilter(job_name=CONTINUOUS_JOB, statuses=IN_FLIGHT), limit=1)
    return runs[0] if runs else None


def recent_failures(instance: dg.DagsterInstance, sensor_name: str) -> tuple[int, float | None]:
    """(consecutive failed runs of this sensor, seconds since the newest ended)."""
    records = instance.get_run_records(filters=dg.RunsFilter(tags={"dagster/sensor_name": sensor_name}), limit=10)
    failures = 0
    for record in records:
        if record.dagster_run.status not in FAILED:
            break
        failures += 1
    if not failures:
        return 0, None
    ended = records[0].end_time or records[0].update_timestamp.timestamp()
    return failures, time.time() - ended


def retry_backoff_seconds(consecutive_failures: int, policy: SensorSettings) -> float:
    """The wait before retrying after `consecutive_failures` failed runs: it doubles with each, up to the maximum."""
    return min(policy.retry_backoff_seconds * 2 ** (consecutive_failures - 1), policy.max_backoff_seconds)
