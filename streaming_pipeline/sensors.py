"""Offset sensors: request a bronze run when enough new Kafka records wait, or when the oldest of
them (by its Kafka timestamp) has waited too long.

Spark keeps the Kafka offsets a bronze query has processed in its checkpoint and commits none to
Kafka, so the sensor reads them from the checkpoint's offset log and compares with the topic's end
offsets. Each tick also reports the consumer lag per partition as an asset observation.
"""

import json
import time

import dagster as dg

from streaming_pipeline.errors import StreamingPipelineError
from streaming_pipeline.kafka_ingestion import checkpoint_kafka_offsets
from streaming_pipeline.resources import KafkaResource, LakehouseResource
from streaming_pipeline.settings import PICKUPS_TOPIC, RIDES_TOPIC

DEFAULT_MIN_NEW_RECORDS = 1000
DEFAULT_MAX_WAIT_SECONDS = 30.0
DEFAULT_INTERVAL_SECONDS = 10


def consumer_lag(end_offsets: dict[int, int], consumed: dict[int, int]) -> dict[int, int]:
    """Records waiting per partition: end offset minus what the checkpoint says was processed."""
    return {partition: max(0, end - consumed.get(partition, 0)) for partition, end in sorted(end_offsets.items())}


_IN_FLIGHT = [dg.DagsterRunStatus.QUEUED, dg.DagsterRunStatus.NOT_STARTED, dg.DagsterRunStatus.STARTING, dg.DagsterRunStatus.STARTED]


def _run_in_flight(context: dg.SensorEvaluationContext, topic: str) -> bool:
    """Whether a run requested for `topic` is still going: two queries must never share a checkpoint."""
    try:
        instance = context.instance
    except Exception:  # evaluated without an instance (unit tests)
        return False
    runs = instance.get_runs(
        filters=dg.RunsFilter(statuses=_IN_FLIGHT, tags={"source_topic": topic}), limit=1
    )
    return bool(runs)


def build_offset_sensor(
    asset_key: dg.AssetKey,
    topic: str,
    *,
    min_new_records: int = DEFAULT_MIN_NEW_RECORDS,
    max_wait_seconds: float = DEFAULT_MAX_WAIT_SECONDS,
    minimum_interval_seconds: int = DEFAULT_INTERVAL_SECONDS,
) -> dg.SensorDefinition:
    asset_name = asset_key.to_user_string()

    @dg.sensor(
        name=f"{asset_name}_offset_sensor",
        description=(
            f"Materializes {asset_name} when at least {min_new_records} new records wait in topic {topic}, "
            f"or when the oldest waiting record is {max_wait_seconds:g} s old."
        ),
        asset_selection=[asset_key],
        minimum_interval_seconds=minimum_interval_seconds,
        default_status=dg.DefaultSensorStatus.RUNNING,
    )
    def offset_sensor(context: dg.SensorEvaluationContext, kafka: KafkaResource, lakehouse: LakehouseResource):
        cursor = json.loads(context.cursor) if context.cursor else {}
        try:
            end_offsets = kafka.end_offsets(topic)
        except StreamingPipelineError as exc:
            return dg.SkipReason(f"Kafka is not reachable, will try again: {exc}")
        consumed = checkpoint_kafka_offsets(lakehouse.checkpoint_path(asset_name)).get(topic, {})
        lag = consumer_lag(end_offsets, consumed)
        waiting = sum(lag.values())
        observation = dg.AssetObservation(
            asset_key=asset_key,
            metadata={
                "consumer_lag": dg.MetadataValue.int(waiting),
                "consumer_lag_by_partition": dg.MetadataValue.json({str(p): n for p, n in lag.items()}),
                "end_offsets": dg.MetadataValue.json({str(p): o for p, o in end_offsets.items()}),
            },
        )
        now = time.time()
        if waiting == 0:
            return dg.SensorResult(
                skip_reason=dg.SkipReason(f"no new records in topic {topic} (end offsets {end_offsets or 'none'})"),
                cursor=json.dumps({}),
                asset_events=[observation] if cursor.get("lag") else [],
            )
        snapshot = ",".join(f"{p}:{o}" for p, o in sorted(end_offsets.items()))
        new_cursor = {"lag": waiting}
        oldest_age = 0.0
        if waiting < min_new_records:
            first_waiting = {p: consumed.get(p, 0) for p, n in lag.items() if n > 0}
            try:
                timestamps = kafka.record_timestamps(topic, first_waiting)
            except StreamingPipelineError as exc:
                return dg.SkipReason(f"Kafka is not reachable, will try again: {exc}")
            oldest_age = now - min(timestamps.values()) if timestamps else 0.0
        if waiting >= min_new_records or oldest_age >= max_wait_seconds:
            if _run_in_flight(context, topic):
                return dg.SensorResult(
                    skip_reason=dg.SkipReason(f"a run of {asset_name} is still in progress; {waiting} record(s) wait"),
                    cursor=json.dumps(new_cursor),
                    asset_events=[observation],
                )
            if cursor.get("requested") == snapshot:
                return dg.SensorResult(
                    skip_reason=dg.SkipReason(f"a run for offsets {snapshot} of {topic} was already requested"),
                    cursor=json.dumps({**new_cursor, "requested": snapshot}),
                    asset_events=[observation],
                )
            return dg.SensorResult(
                run_requests=[
                    dg.RunRequest(run_key=f"{topic}@{snapshot}", asset_selection=[asset_key], tags={"source_topic": topic})
                ],
                cursor=json.dumps({**new_cursor, "requested": snapshot}),
                asset_events=[observation],
            )
        return dg.SensorResult(
            skip_reason=dg.SkipReason(
                f"{waiting} new record(s) in {topic}, waiting for {min_new_records} of them or for the oldest "
                f"to be {max_wait_seconds:g} s old (it is {oldest_age:.0f} s old)"
            ),
            cursor=json.dumps(new_cursor),
            asset_events=[observation],
        )

    return offset_sensor


def build_sensors(min_new_records: int = DEFAULT_MIN_NEW_RECORDS, max_wait_seconds: float = DEFAULT_MAX_WAIT_SECONDS):
    return [
        build_offset_sensor(dg.AssetKey("raw_rides"), RIDES_TOPIC, min_new_records=min_new_records, max_wait_seconds=max_wait_seconds),
        build_offset_sensor(
            dg.AssetKey("raw_pickup_locations"), PICKUPS_TOPIC, min_new_records=min_new_records, max_wait_seconds=max_wait_seconds
        ),
    ]
