"""The offset sensors: the policy as a pure function, and the sensor against a real broker and a real instance."""

from __future__ import annotations

import time
import uuid

import dagster as dg
import pytest

from streaming_pipeline.components.kafka_delta_source.sensors import Decision, build_offset_sensor, decide, live_job
from streaming_pipeline.lakehouse.bronze.offsets import consumer_lag
from streaming_pipeline.lakehouse.errors import BrokerUnavailableError
from streaming_pipeline.lakehouse.settings import SensorSettings
from streaming_pipeline.lakehouse.tables import RIDES_TOPIC
from streaming_pipeline.resources import KafkaResource, LakehouseResource
from streaming_pipeline_tests.kafka_helpers import produce_raw

#: What a fast run of raw_rides writes in the project (`streamed_table.fast_run_tables`).
FAST_RUN = ["raw_rides", "vendor_counts"]
POLICY = SensorSettings(min_records=10, max_wait_seconds=30, retry_backoff_seconds=5, max_backoff_seconds=60)


def _decide(**overrides: object) -> Decision:
    inputs: dict[str, object] = dict(
        waiting=0,
        oldest_age_seconds=None,
        busy=None,
        consecutive_failures=0,
        seconds_since_failure=None,
        policy=POLICY,
    )
    inputs.update(overrides)
    return decide(**inputs)  # type: ignore[arg-type]


def test_consumer_lag_counts_records_past_the_checkpoint_per_partition() -> None:
    assert consumer_lag({0: 10, 1: 5, 2: 0}, {0: 4, 1: 5}) == {0: 6, 1: 0, 2: 0}


def test_nothing_waiting_requests_nothing() -> None:
    assert _decide(waiting=0) == Decision(False, "no new records")


def test_enough_waiting_records_request_a_run_unless_the_checkpoint_is_busy() -> None:
    assert _decide(waiting=10).request
    assert _decide(waiting=10, busy="the raw_rides step of run r1 is in flight") == Decision(
        False, "10 record(s) wait; the raw_rides step of run r1 is in flight"
    )


def test_few_records_wait_until_the_oldest_is_old_enough() -> None:
    assert not _decide(waiting=3, oldest_age_seconds=29.0).request
    assert _decide(waiting=3, oldest_age_seconds=30.0) == Decision(True, "3 record(s) wait, the oldest for 30 s")
    assert not _decide(waiting=3, oldest_age_seconds=None).request


def test_default_policy_requests_as_soon_as_one_record_waits() -> None:
    assert decide(
        waiting=1,
        oldest_age_seconds=None,
        busy=None,
        consecutive_failures=0,
        seconds_since_failure=None,
        policy=SensorSettings(),
    ).request


def test_failed_runs_are_retried_after_a_back_off_that_doubles_up_to_the_maximum() -> None:
    # 5 s after one failure, 10 s after two, 20 s after three, capped at 60 s.
    assert not _decide(waiting=10, consecutive_failures=1, seconds_since_failure=4.9).request
    assert _decide(waiting=10, consecutive_failures=1, seconds_since_failure=5.0).request
    assert not _decide(waiting=10, consecutive_failures=2, seconds_since_failure=9.0).request
    assert _decide(waiting=10, consecutive_failures=2, seconds_since_failure=10.0).request
    assert not _decide(waiting=10, consecutive_failures=3, seconds_since_failure=19.0).request
    assert not _decide(waiting=10, consecutive_failures=9, seconds_since_failure=59.0).request
    assert _decide(waiting=10, consecutive_failures=9, seconds_since_failure=60.0).request
    assert "retrying 1 s from now" in _decide(waiting=10, consecutive_failures=1, seconds_since_failure=4.0).reason


def test_sensor_settings_come_from_documented_environment_variables() -> None:
    settings = SensorSettings.from_env(
        {
            "OFFSET_SENSOR_MIN_RECORDS": "500",
            "OFFSET_SENSOR_INTERVAL_SECONDS": "7",
            "OFFSET_SENSOR_RETRY_BACKOFF_SECONDS": "2.5",
        }
    )
    assert (settings.min_records, settings.interval_seconds, settings.retry_backoff_seconds) == (500, 7, 2.5)
    from streaming_pipeline.lakehouse.errors import ConfigurationError

    with pytest.raises(ConfigurationError, match="OFFSET_SENSOR_MAX_WAIT_SECONDS='soon'"):
        SensorSettings.from_env({"OFFSET_SENSOR_MAX_WAIT_SECONDS": "soon"})


def test_the_live_job_selects_bronze_and_everything_downstream_without_checks() -> None:
    from streaming_pipeline.definitions import defs

    job = defs.resolve_job_def("raw_rides_to_gold_job")
    # Every node is an asset (no check steps), and they are bronze raw_rides and everything downstream of it.
    assert sorted(node.name for node in job.nodes) == [
        "dead_letter_records",
        "high_amount_rides",
        "low_amount_rides",
        "raw_rides",
        "ride_pickup_joins",
        "ride_window_aggregates",
        "rides_enriched",
        "vendor_counts",
    ]


def test_sensor_skips_with_reason_when_kafka_is_down(tmp_path) -> None:
    key = dg.AssetKey("raw_rides")
    sensor = build_offset_sensor(key, RIDES_TOPIC, live_job(key), SensorSettings(), FAST_RUN)
    resources = {
        "kafka": KafkaResource(bootstrap_servers="127.0.0.1:1", timeout_seconds=2),
        "lakehouse": LakehouseResource(root=str(tmp_path / "lakehouse")),
    }
    result = sensor(dg.build_sensor_context(resources=resources, instance=dg.DagsterInstance.ephemeral()))
    assert isinstance(result, dg.SkipReason)
    assert "Kafka is not reachable" in (result.skip_message or "")


def test_asking_a_broker_that_is_away_raises_and_writes_nothing_to_stderr(capfd: pytest.CaptureFixture[str]) -> None:
    """librdkafka would write a line to stderr for every try to connect, every 50 to 100 ms: a sensor tick or a
    continuous run's report while the broker is away would add hundreds. The reason is in the exception."""
    from confluent_kafka import KafkaException, TopicPartition

    kafka = KafkaResource(bootstrap_servers="127.0.0.1:1", timeout_seconds=1)
    with pytest.raises(BrokerUnavailableError, match="Kafka at 127.0.0.1:1 did not answer within 1 s"):
        kafka.topic_partitions(RIDES_TOPIC)
    consumer = kafka.consumer(group_id="probe")
    with pytest.raises(KafkaException, match="All broker connections are down"):
        consumer.get_watermark_offsets(TopicPartition(RIDES_TOPIC, 0), timeout=1, cached=False)
    consumer.close()
    assert "rdkafka" not in capfd.readouterr().err


class _ElectingConsumer:
    """A consumer whose partition answers `errors` in turn before its watermarks (0, 5)."""

    def __init__(self, errors: list[int]) -> None:
        self.errors = errors
        self.asked = 0

    def get_watermark_offsets(self, partition: object, timeout: float, cached: bool) -> tuple[int, int]:
        from confluent_kafka import KafkaError, KafkaException

        self.asked += 1
        if self.errors:
            raise KafkaException(KafkaError(self.errors.pop(0)))
        return 0, 5

    def close(self) -> None:
        pass


def test_the_offsets_are_asked_again_while_a_partitions_leader_is_elected_and_other_errors_raise_at_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A broker just started (a bench's fresh stack) or a topic just created answers NOT_LEADER_FOR_PARTITION or
    LEADER_NOT_AVAILABLE for a moment; that is no outage."""
    from confluent_kafka import KafkaError

    monkeypatch.setattr(KafkaResource, "topic_partitions", lambda self, topic: [0])
    kafka = KafkaResource(bootstrap_servers="127.0.0.1:1", timeout_seconds=5)

    electing = _ElectingConsumer([KafkaError.NOT_LEADER_FOR_PARTITION, KafkaError.LEADER_NOT_AVAILABLE])
    monkeypatch.setattr(KafkaResource, "consumer", lambda self, group_id: electing)
    assert kafka.watermark_offsets(RIDES_TOPIC) == {0: (0, 5)}
    assert electing.asked == 3

    away = _ElectingConsumer([KafkaError._TRANSPORT])
    monkeypatch.setattr(KafkaResource, "consumer", lambda self, group_id: away)
    with pytest.raises(BrokerUnavailableError, match=rf"offsets of {RIDES_TOPIC}\[0\] from 127.0.0.1:1: .*TRANSPORT"):
        kafka.watermark_offsets(RIDES_TOPIC)
    assert away.asked == 1

    # A leader that never comes: the error once the timeout has passed.
    never = _ElectingConsumer([KafkaError.NOT_LEADER_FOR_PARTITION] * 1000)
    monkeypatch.setattr(KafkaResource, "consumer", lambda self, group_id: never)
    kafka = KafkaResource(bootstrap_servers="127.0.0.1:1", timeout_seconds=0.5)
    started = time.monotonic()
    with pytest.raises(BrokerUnavailableError, match="NOT_LEADER_FOR_PARTITION"):
        kafka.watermark_offsets(RIDES_TOPIC)
    assert 0.5 <= time.monotonic() - started < 2 and never.asked > 1


@pytest.mark.integration
def test_sensor_requests_a_run_per_tick_with_unique_keys_while_records_wait(pipeline_resources) -> None:
    # A topic no other client of the session's broker has ever named: a metadata request naming a missing topic
    # creates it (the broker's defaults), so a client an earlier test left behind could create `rides` itself.
    # The sensor takes any topic; the producer only the declared ones.
    topic = f"sensor-ticks-{uuid.uuid4().hex}"
    key = dg.AssetKey("raw_rides")
    job = live_job(key)
    sensor = build_offset_sensor(key, topic, job, SensorSettings(min_records=10, max_wait_seconds=3600), FAST_RUN)
    resources = {"kafka": pipeline_resources["kafka"], "lakehouse": pipeline_resources["lakehouse"]}
    instance = dg.DagsterInstance.ephemeral()

    empty = sensor(dg.build_sensor_context(resources=resources, instance=instance))
    assert not empty.run_requests and "no new records" in empty.skip_reason.skip_message
    # The tick did not create the topic (a metadata request naming it would, with the broker's defaults).
    assert topic not in pipeline_resources["kafka"].admin().list_topics(timeout=10).topics

    # The sensor counts records, it does not read them: plain bytes will do.
    kafka = pipeline_resources["kafka"]
    kafka.ensure_topic(topic)
    produce_raw(kafka.bootstrap_servers, topic, [(None, b"a ride")] * 4)
    few = sensor(dg.build_sensor_context(resources=resources, instance=instance, cursor=empty.cursor))
    assert not few.run_requests and "4 record(s) wait; waiting for 10" in few.skip_reason.skip_message
    assert few.asset_events[0].metadata["consumer_lag"].value == 4

    produce_raw(kafka.bootstrap_servers, topic, [(None, b"a ride")] * 6)
    first = sensor(dg.build_sensor_context(resources=resources, instance=instance, cursor=few.cursor))
    snapshot = ",".join(f"{p}:{o}" for p, o in sorted(pipeline_resources["kafka"].end_offsets(topic).items()))
    assert [r.run_key for r in first.run_requests] == [f"{topic}@{snapshot}#1"]
    # Nothing ran (no run in flight, none failed): the next tick asks again, with a key of its own.
    second = sensor(dg.build_sensor_context(resources=resources, instance=instance, cursor=first.cursor))
    assert [r.run_key for r in second.run_requests] == [f"{topic}@{snapshot}#2"]
    assert not second.asset_events  # the lag did not change: no new observation


@pytest.mark.integration
def test_sensor_requests_a_run_when_the_oldest_waiting_record_is_older_than_max_wait(pipeline_resources) -> None:
    from confluent_kafka import Producer

    kafka = pipeline_resources["kafka"]
    resources = {"kafka": kafka, "lakehouse": pipeline_resources["lakehouse"]}
    kafka.ensure_topic(RIDES_TOPIC)
    producer = Producer({"bootstrap.servers": kafka.bootstrap_servers})
    producer.produce(RIDES_TOPIC, value=b"fresh", partition=0, timestamp=int(time.time() * 1000))
    producer.flush(10)
    key = dg.AssetKey("raw_rides")
    patient = build_offset_sensor(
        key, RIDES_TOPIC, live_job(key), SensorSettings(min_records=1000, max_wait_seconds=60), FAST_RUN
    )
    instance = dg.DagsterInstance.ephemeral()
    fresh = patient(dg.build_sensor_context(resources=resources, instance=instance))
    assert not fresh.run_requests and "waiting for 1000" in fresh.skip_reason.skip_message

    producer.produce(RIDES_TOPIC, value=b"old", partition=1, timestamp=int((time.time() - 120) * 1000))
    producer.flush(10)
    stale = patient(dg.build_sensor_context(resources=resources, instance=instance, cursor=fresh.cursor))
    assert len(stale.run_requests) == 1


class _Instance:
    """The two reads checkpoint_runs makes of a Dagster instance: the runs in flight, and a run's step stats."""

    run_launcher = None  # not Dagster's default launcher: no run's process is looked for

    def __init__(self, runs: list[dg.DagsterRun], bronze_ended: dict[str, float | None]) -> None:
        self.runs, self.bronze_ended = runs, bronze_ended

    def get_runs(self, filters: dg.RunsFilter, limit: int) -> list[dg.DagsterRun]:
        return [run for run in self.runs if run.status in (filters.statuses or [])][:limit]

    def get_run_step_stats(self, run_id: str, step_keys: list[str]) -> list[object]:
        from types import SimpleNamespace

        assert step_keys == ["raw_rides"]
        if run_id not in self.bronze_ended:
            return []
        return [SimpleNamespace(step_key="raw_rides", end_time=self.bronze_ended[run_id])]


def _run(
    run_id: str,
    status: dg.DagsterRunStatus,
    job_name: str = "raw_rides_downstream_job",
    assets: set[str] | None = None,
) -> dg.DagsterRun:
    selection = frozenset(dg.AssetKey(name) for name in assets) if assets is not None else None
    return dg.DagsterRun(job_name=job_name, run_id=run_id, status=status, asset_selection=selection)


def test_the_checkpoint_is_busy_until_the_bronze_step_of_the_run_in_flight_is_done() -> None:
    from streaming_pipeline.components.kafka_delta_source.sensors import CheckpointRuns, checkpoint_runs

    key = dg.AssetKey("raw_rides")
    fast = frozenset({key, dg.AssetKey("vendor_counts")})

    def runs(runs: list[dg.DagsterRun], ended: dict[str, float | None]) -> CheckpointRuns:
        return checkpoint_runs(_Instance(runs, ended), key, fast)  # type: ignore[arg-type]

    started, starting = dg.DagsterRunStatus.STARTED, dg.DagsterRunStatus.STARTING
    assert runs([], {}) == CheckpointRuns(None, False)
    assert runs([_run("r1", starting)], {}) == CheckpointRuns("run r1 on this checkpoint is starting", False)
    assert runs([_run("r1", started)], {}).busy == "the raw_rides step of run r1 is in flight"
    assert runs([_run("r1", started)], {"r1": None}).busy == "the raw_rides step of run r1 is in flight"
    # A run of the job under its name until 0.9.0 holds the checkpoint too.
    assert runs([_run("r1", started, "raw_rides_to_gold_job")], {}).busy == "the raw_rides step of run r1 is in flight"
    # Bronze done, silver and gold going on: the next run may start its bronze step, as a fast run.
    assert runs([_run("r1", started)], {"r1": 100.0}) == CheckpointRuns(None, True)
    everything = {"raw_rides", "vendor_counts", "rides_enriched"}
    assert runs([_run("r1", started, "__ASSET_JOB", everything)], {"r1": 100.0}) == CheckpointRuns(None, True)
    # Only fast runs past their bronze step (vendor_counts going on): the next run is a whole one.
    assert runs([_run("f1", started, assets={"raw_rides", "vendor_counts"})], {"f1": 100.0}) == CheckpointRuns(
        None, False
    )
    assert runs(
        [_run("r1", started), _run("f1", started, assets={"raw_rides", "vendor_counts"})], {"r1": 90.0, "f1": 100.0}
    ) == CheckpointRuns(None, True)
    # A fast run in its bronze step holds the checkpoint like any other.
    assert runs([_run("f1", started, assets={"raw_rides", "vendor_counts"})], {}).busy == (
        "the raw_rides step of run f1 is in flight"
    )
    # Finished runs do not count, nor runs of other assets; a continuous run streams every checkpoint.
    assert runs([_run("r0", dg.DagsterRunStatus.SUCCESS)], {}) == CheckpointRuns(None, False)
    assert runs([_run("t1", started, "__ASSET_JOB", {"taxi_zones"})], {}) == CheckpointRuns(None, False)
    assert runs([_run("c1", started, "continuous_streams_job")], {}).busy == "the continuous run c1 streams this topic"
