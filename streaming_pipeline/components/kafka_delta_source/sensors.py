"""Offset sensors (one per source, built by `sources.py`): one run from Kafka to gold as soon as records wait
and no step works on the bronze checkpoint.

Spark commits no offsets to Kafka; the bronze table's Delta transactions name its newest micro-batch, whose end
offsets are in the query checkpoint, so a tick compares the topic's end offsets with the table's (on any storage,
from the newest Delta checkpoint on: the cost does not grow with the table's history). The run it requests
targets a job that selects the bronze asset and everything downstream of it, so gold follows in the same run.
While a run that touches the bronze asset (a sensor run, a manual or a UI run) is queued or in its bronze step,
nothing is requested: new records batch up by themselves. Once its bronze step is done, the next run may start
while it finishes its silver and gold steps (each step holds its checkpoint's pool). That next run is a *fast*
run, of the bronze asset and the latency-critical tables that read only it (`streamed_table.fast_run_tables`), as
long as a whole run is in flight: so the bronze table is as fresh as its own step allows however long the
tables downstream take under load, and the next whole run (or, after the last records, the automation sensor:
the tables downstream are eager on their sources) carries what the fast runs ingested downstream.
A failed run is retried after a back-off that doubles with each consecutive failure.

`decide` is the whole policy as a pure function; the sensor only gathers its inputs.
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from dataclasses import dataclass

import dagster as dg

from streaming_pipeline.components.live_runs import (
    CONTINUOUS_JOB,
    IN_FLIGHT,
    recent_failures,
    retry_backoff_seconds,
    runs_in_flight,
)
from streaming_pipeline.lakehouse.bronze.offsets import consumed_offsets, consumer_lag, topic_problems
from streaming_pipeline.lakehouse.errors import BronzeStateError, CredentialsError, StreamingPipelineError
from streaming_pipeline.lakehouse.settings import SensorSettings
from streaming_pipeline.resources import KafkaResource, LakehouseResource

#: The tag of a fast run (the bronze asset and the latency-critical tables that read only it).
FAST_RUN_TAG = "streaming_pipeline/fast_run"


@dataclass(frozen=True)
class Decision:
    request: bool
    reason: str


def decide(
    *,
    waiting: int,
    oldest_age_seconds: float | None,
    busy: str | None,
    consecutive_failures: int,
    seconds_since_failure: float | None,
    policy: SensorSettings,
) -> Decision:
    """Whether to request a run now, and why (or why not)."""
    if waiting == 0:
        return Decision(False, "no new records")
    if busy:
        return Decision(False, f"{waiting} record(s) wait; {busy}")
    if consecutive_failures and seconds_since_failure is not None:
        backoff = retry_backoff_seconds(consecutive_failures, policy)
        if seconds_since_failure < backoff:
            return Decision(
                False,
                f"{waiting} record(s) wait; the last {consecutive_failures} run(s) failed, retrying "
                f"{backoff - seconds_since_failure:.0f} s from now",
            )
    if waiting >= policy.min_records:
        return Decision(True, f"{waiting} record(s) wait")
    if oldest_age_seconds is not None and oldest_age_seconds >= policy.max_wait_seconds:
        return Decision(True, f"{waiting} record(s) wait, the oldest for {oldest_age_seconds:.0f} s")
    age = f"{oldest_age_seconds:.0f} s" if oldest_age_seconds is not None else "unknown"
    return Decision(
        False,
        f"{waiting} record(s) wait; waiting for {policy.min_records} of them or for the oldest to be "
        f"{policy.max_wait_seconds:g} s old (it is {age})",
    )


@dataclass(frozen=True)
class CheckpointRuns:
    """The runs in flight on a bronze checkpoint, as the sensor sees them."""

    busy: str | None  # why a new run would have to wait (None: it would start at once)
    whole_run_in_flight: bool  # a run of more than the fast-run tables is past its bronze step


def checkpoint_runs(
    instance: dg.DagsterInstance, asset_key: dg.AssetKey, fast_run_keys: frozenset[dg.AssetKey]
) -> CheckpointRuns:
    """Whether a new run would have to wait for the bronze checkpoint: a continuous run streams it, or a run that
    materializes the bronze asset (whoever started it) is queued or has not finished its bronze step; and whether a
    whole run (more than `fast_run_keys`) is in flight, past its bronze step."""
    step_key = asset_key.to_user_string()
    on_checkpoint = []
    for run in runs_in_flight(instance, dg.RunsFilter(statuses=IN_FLIGHT), limit=100):
        if run.job_name == CONTINUOUS_JOB:
            return CheckpointRuns(f"the continuous run {run.run_id} streams this topic", False)
        if (run.job_name in live_job_names(asset_key) and not run.asset_selection) or (
            run.asset_selection and asset_key in run.asset_selection
        ):
            on_checkpoint.append(run)
    for run in on_checkpoint:
        if run.status not in (dg.DagsterRunStatus.STARTED, dg.DagsterRunStatus.CANCELING):
            return CheckpointRuns(f"run {run.run_id} on this checkpoint is {run.status.value.lower()}", False)
        stats = instance.get_run_step_stats(run.run_id, step_keys=[step_key])
        if not stats or stats[0].end_time is None:
            return CheckpointRuns(f"the {step_key} step of run {run.run_id} is in flight", False)
    whole = any(not run.asset_selection or not run.asset_selection <= fast_run_keys for run in on_checkpoint)
    return CheckpointRuns(None, whole)


@dataclass(frozen=True)
class _TopicState:
    """What a tick reads: the topic's (earliest, end) offsets per partition and what the bronze table consumed."""

    watermarks: dict[int, tuple[int, int]]
    consumed: dict[int, int]

    @property
    def end_offsets(self) -> dict[int, int]:
        return {p: high for p, (_, high) in self.watermarks.items()}

    @property
    def lag(self) -> dict[int, int]:
        return consumer_lag(self.end_offsets, self.consumed)


def _oldest_waiting_age(kafka: KafkaResource, topic: str, state: _TopicState) -> float | None:
    """Seconds since the oldest record waiting to be consumed was produced (None when unreadable)."""
    first_waiting = {p: state.consumed.get(p, 0) for p, n in state.lag.items() if n > 0}
    timestamps = kafka.record_timestamps(topic, first_waiting)
    return time.time() - min(timestamps.values()) if timestamps else None


def lag_observation(asset_key: dg.AssetKey, end_offsets: dict[int, int], lag: dict[int, int]) -> dg.AssetObservation:
    """The consumer lag of a bronze table as an observation of its asset (the offset sensors' and the continuous
    run's)."""
    return dg.AssetObservation(
        asset_key=asset_key,
        metadata={
            "consumer_lag": dg.MetadataValue.int(sum(lag.values())),
            "consumer_lag_by_partition": dg.MetadataValue.json({str(p): n for p, n in lag.items()}),
            "end_offsets": dg.MetadataValue.json({str(p): o for p, o in end_offsets.items()}),
        },
    )


def _run_request(
    topic: str,
    state: _TopicState,
    number: int,
    fast_run: list[dg.AssetKey] | None = None,
    fast_run_checks: Sequence[dg.AssetCheckKey] = (),
) -> dg.RunRequest:
    """A whole run of the live job, or a fast run of `fast_run`'s assets only (tagged `fast_run`); neither runs the
    assets' checks (an asset selection would bring them along: they scan whole tables), but the checks a table's
    run evaluates on the rows it writes (its expectations, `fast_run_checks` in a fast run)."""
    snapshot = ",".join(f"{p}:{o}" for p, o in sorted(state.end_offsets.items()))
    tags = {"source_topic": topic, **({FAST_RUN_TAG: "true"} if fast_run else {})}
    # The request number makes every key unique: a key never stands in the way of retrying a failed run.
    return dg.RunRequest(
        run_key=f"{topic}@{snapshot}#{number}",
        tags=tags,
        asset_selection=fast_run,
        asset_check_keys=list(fast_run_checks) if fast_run else None,
    )


def build_offset_sensor(
    asset_key: dg.AssetKey,
    topic: str,
    job: dg.UnresolvedAssetJobDefinition,
    policy: SensorSettings,
    fast_run: Sequence[str],
    *,
    running_by_default: bool = True,
    table_topic: bool = False,
    fast_run_checks: Sequence[dg.AssetCheckKey] = (),
) -> dg.SensorDefinition:
    """The topic's offset sensor; `running_by_default` False in continuous mode (the continuous run streams the
    topic; started by hand, the sensor still stands aside while a continuous run is in flight). A `table_topic`'s
    records deleted before they were read (compaction) are no alarm. A fast run evaluates `fast_run_checks` (the
    expectations of the tables it writes)."""
    asset_name = asset_key.to_user_string()
    fast_keys = frozenset(dg.AssetKey(name) for name in fast_run)
    sensor_name = f"{asset_name}_offset_sensor"

    @dg.sensor(
        name=sensor_name,
        description=(
            f"Runs {job.name} (bronze {asset_name} and everything downstream) as soon as records wait in topic "
            f"{topic} and no run works on its checkpoint; retries failed runs with back-off."
        ),
        job=job,
        minimum_interval_seconds=policy.interval_seconds,
        default_status=dg.DefaultSensorStatus.RUNNING if running_by_default else dg.DefaultSensorStatus.STOPPED,
    )
    def offset_sensor(
        context: dg.SensorEvaluationContext, kafka: KafkaResource, lakehouse: LakehouseResource
    ) -> dg.SensorResult | dg.SkipReason:
        cursor = json.loads(context.cursor) if context.cursor else {}
        try:
            consumed = consumed_offsets(
                lakehouse.table_path(asset_name), lakehouse.checkpoint_path(asset_name), asset_name, topic
            )
        except BronzeStateError as exc:
            # Every run would stop on it at its start: say what is wrong and how to recover, and request nothing.
            return dg.SkipReason(str(exc))
        try:
            state = _TopicState(kafka.watermark_offsets(topic), consumed)
            problems = topic_problems(asset_name, topic, state.consumed, state.watermarks, table_topic=table_topic)
            waiting = sum(state.lag.values())
            if 0 < waiting < policy.min_records and not problems:
                oldest_age = _oldest_waiting_age(kafka, topic, state)
            else:
                oldest_age = None
        except CredentialsError as exc:
            # No run could read the topic either: say which setting to fix (the message holds no secret).
            return dg.SkipReason(f"Kafka refused the code location's client (fix the setting, then reload it): {exc}")
        except StreamingPipelineError as exc:
            return dg.SkipReason(f"Kafka is not reachable, will try again: {exc}")
        if problems:
            # Every run would fail on it: say what is wrong and how to recover, and request nothing.
            return dg.SkipReason(problems.message())
        # The lag as an observation when it changed: at once when it goes to or from zero, else at most once per
        # lag_report_seconds (every tick under load would store ~17,000 events a day, which no retention deletes).
        previous, now = int(cursor.get("lag", 0)), time.time()
        observed_at = float(cursor.get("observed_at", 0.0))
        report = waiting != previous and (0 in (waiting, previous) or now - observed_at >= policy.lag_report_seconds)
        events = [lag_observation(asset_key, state.end_offsets, state.lag)] if report else []
        reported_lag, observed_at = (waiting, now) if report else (previous, observed_at)
        failures, since_failure = recent_failures(context.instance, sensor_name) if waiting else (0, None)
        runs = CheckpointRuns(None, False)
        if waiting:
            runs = checkpoint_runs(context.instance, asset_key, fast_keys)
        decision = decide(
            waiting=waiting,
            oldest_age_seconds=oldest_age,
            busy=runs.busy,
            consecutive_failures=failures,
            seconds_since_failure=since_failure,
            policy=policy,
        )
        requests = int(cursor.get("requests", 0)) + int(decision.request)
        fast = sorted(fast_keys, key=lambda k: k.to_user_string()) if runs.whole_run_in_flight else None
        return dg.SensorResult(
            run_requests=[_run_request(topic, state, requests, fast, fast_run_checks)] if decision.request else None,
            skip_reason=None if decision.request else dg.SkipReason(f"{topic}: {decision.reason}"),
            cursor=json.dumps({"lag": reported_lag, "observed_at": observed_at, "requests": requests}),
            asset_events=events,
        )

    return offset_sensor


def live_job(asset_key: dg.AssetKey, checks: Sequence[dg.AssetCheckKey] = ()) -> dg.UnresolvedAssetJobDefinition:
    """The bronze asset and everything downstream of it, without asset checks (they scan whole tables) but `checks`,
    those its tables' runs evaluate on the rows they write (their expectations)."""
    description = f"New records from Kafka through bronze {asset_key.to_user_string()} to every table downstream."
    return downstream_job(live_job_names(asset_key)[0], asset_key, description, checks)


def live_job_names(asset_key: dg.AssetKey) -> tuple[str, str]:
    """The names of a bronze asset's live job: its own, and the one this project's sources had until 0.9.0
    (`defs/bronze/renamed_live_jobs.py`), which a run in the history may have."""
    name = asset_key.to_user_string()
    return f"{name}_downstream_job", f"{name}_to_gold_job"


def downstream_job(
    name: str, asset_key: dg.AssetKey, description: str, checks: Sequence[dg.AssetCheckKey] = ()
) -> dg.UnresolvedAssetJobDefinition:
    selection = dg.AssetSelection.assets(asset_key).downstream().without_checks()
    return dg.define_asset_job(
        name=name,
        selection=selection | dg.AssetSelection.checks(*checks) if checks else selection,
        description=description,
    )
