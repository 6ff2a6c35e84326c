"""What the live sensors read of Dagster's runs: which are in flight, how many of a sensor's last runs failed in a
row, and the back-off before the next retry. Shared by the offset sensors and the continuous mode's sensor."""

from __future__ import annotations

import time

import dagster as dg

from streaming_pipeline.lakehouse.process_state import process_alive
from streaming_pipeline.lakehouse.settings import SensorSettings

#: The continuous mode's job (`components/continuous/job.py`): while a run of it is in flight, the offset sensors
#: stand aside.
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
    """The continuous mode's run that is queued or running, if any (a run whose process is gone is marked failed
    first, see `runs_in_flight`)."""
    runs = runs_in_flight(instance, dg.RunsFilter(job_name=CONTINUOUS_JOB, statuses=IN_FLIGHT), limit=1)
    return runs[0] if runs else None


def runs_in_flight(instance: dg.DagsterInstance, filters: dg.RunsFilter, limit: int) -> list[dg.DagsterRun]:
    """The runs `filters` selects, after marking failed each started run whose process is gone.

    Under Dagster's default run launcher a run is a process of the code server that launched it, which marks it
    failed when it dies. When the code server died too (`dagster dev` stopped, or killed, during the run), nothing
    does, and run monitoring cannot look at such a process: the run would stay STARTED, and hold back the sensors
    that wait for it, for good. The in-process executor records the run's pid when the run starts."""
    runs = list(instance.get_runs(filters=filters, limit=limit))
    if type(instance.run_launcher).__name__ != "DefaultRunLauncher":
        return runs
    alive = []
    for run in runs:
        pid = run_pid(instance, run.run_id) if run.status == dg.DagsterRunStatus.STARTED else None
        if pid is not None and not process_alive(pid):
            instance.report_run_failed(run, f"the run's process (pid {pid}) is gone: it was killed or its host stopped")
            continue
        alive.append(run)
    return alive


def run_pid(instance: dg.DagsterInstance, run_id: str) -> int | None:
    """The pid of the run's process, as the in-process executor recorded it in the run's first engine events."""
    records = instance.get_records_for_run(run_id, of_type=dg.DagsterEventType.ENGINE_EVENT, limit=5).records
    for record in records:
        event = record.event_log_entry.dagster_event
        data = event.engine_event_data if event is not None else None
        pid = data.metadata.get("pid") if data is not None else None
        if pid is not None and str(pid.value).isdigit():
            return int(str(pid.value))
    return None


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
