"""The sensor that keeps one continuous run in flight (docs/continuous-mode.md)."""

import dagster as dg

from streaming_pipeline.components.live_runs import (
    CONTINUOUS_JOB,
    continuous_run_in_flight,
    recent_failures,
    retry_backoff_seconds,
)
from streaming_pipeline.lakehouse.settings import LiveSettings, SensorSettings

CONTINUOUS_SENSOR = "continuous_streams_sensor"


def build_continuous_sensor(job: dg.JobDefinition, policy: SensorSettings, live: LiveSettings) -> dg.SensorDefinition:
    """The sensor that launches a run of `job` when none is in flight, and relaunches it with back-off after a failure.

    Args:
        job: The continuous run's job (`build_continuous_job`).
        policy: The sensors' interval and retry back-off.
        live: The live mode: with LIVE_MODE=continuous the sensor is running by default.

    Returns:
        The sensor `continuous_streams_sensor`.
    """

    @dg.sensor(
        name=CONTINUOUS_SENSOR,
        job=job,
        description=f"Keeps one run of {CONTINUOUS_JOB} in flight: launches it when there is none, and relaunches "
        "it with back-off after a failure. Running by default with LIVE_MODE=continuous.",
        minimum_interval_seconds=policy.interval_seconds,
        default_status=dg.DefaultSensorStatus.RUNNING if live.continuous else dg.DefaultSensorStatus.STOPPED,
    )
    def continuous_streams_sensor(context: dg.SensorEvaluationContext) -> dg.RunRequest | dg.SkipReason:
        run = continuous_run_in_flight(context.instance)
        if run is not None:
            return dg.SkipReason(f"run {run.run_id} streams ({run.status.value.lower()})")
        failures, since = recent_failures(context.instance, CONTINUOUS_SENSOR)
        if failures and since is not None:
            backoff = retry_backoff_seconds(failures, policy)
            if since < backoff:
                return dg.SkipReason(f"the last {failures} run(s) failed; relaunching {backoff - since:.0f} s from now")
        number = int(context.cursor or 0) + 1
        context.update_cursor(str(number))
        return dg.RunRequest(run_key=f"continuous#{number}")

    return continuous_streams_sensor
