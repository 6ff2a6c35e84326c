"""The continuous mode's settings and definitions: LIVE_MODE and its companions, the job that holds every
checkpoint's pool, and which sensors run by default in each mode."""

from __future__ import annotations

import pytest

from streaming_pipeline.asset_metadata import checkpoint_pool
from streaming_pipeline.errors import ConfigurationError
from streaming_pipeline.live_queries import live_query_names
from streaming_pipeline.settings import LiveSettings


def test_live_settings_default_to_the_triggered_mode() -> None:
    assert LiveSettings.from_env({}) == LiveSettings(
        mode="triggered",
        trigger_interval="500 milliseconds",
        downstream_trigger_interval="5 seconds",
        report_seconds=30.0,
        reconcile_seconds=60.0,
    )
    assert not LiveSettings.from_env({}).continuous


def test_live_settings_read_the_continuous_mode_and_its_intervals() -> None:
    settings = LiveSettings.from_env(
        {
            "LIVE_MODE": " Continuous ",
            "CONTINUOUS_TRIGGER_INTERVAL": "2 Seconds",
            "CONTINUOUS_DOWNSTREAM_TRIGGER_INTERVAL": "1 minute",
            "CONTINUOUS_REPORT_SECONDS": "10",
            "CONTINUOUS_RECONCILE_SECONDS": "120",
        }
    )
    assert settings == LiveSettings(
        mode="continuous",
        trigger_interval="2 seconds",
        downstream_trigger_interval="1 minutes",
        report_seconds=10.0,
        reconcile_seconds=120.0,
    )
    assert settings.continuous


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"LIVE_MODE": "streaming"}, "LIVE_MODE='streaming' is not one of triggered, continuous"),
        ({"CONTINUOUS_TRIGGER_INTERVAL": "fast"}, "CONTINUOUS_TRIGGER_INTERVAL='fast' is not a positive interval"),
        ({"CONTINUOUS_TRIGGER_INTERVAL": "0 seconds"}, "CONTINUOUS_TRIGGER_INTERVAL='0 seconds' is not a positive"),
        ({"CONTINUOUS_REPORT_SECONDS": "-5"}, "CONTINUOUS_REPORT_SECONDS='-5' is not a positive number"),
    ],
)
def test_a_live_setting_that_cannot_be_used_is_named(env: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigurationError, match=message):
        LiveSettings.from_env(env)


def test_the_continuous_job_streams_the_checkpoint_of_every_triggered_step() -> None:
    from streaming_pipeline.definitions import defs

    assert live_query_names() == [
        "raw_pickup_locations",
        "raw_rides",
        "amount_branches",
        "rides_enriched",
        "ride_pickup_joins",
        "vendor_counts",
        "ride_window_aggregates",
    ]
    job = defs.resolve_job_def("continuous_streams_job")
    assert [node.name for node in job.nodes] == ["continuous_streams"]
    # The op claims its pools itself, one claim per checkpoint (so that it can lend each alone).
    assert job.graph.node_named("continuous_streams").definition.pool is None
    # Each name is the pool of the triggered step that runs the same query.
    steps = {
        node.name: node.definition.pool
        for name in ("raw_rides_to_gold_job", "raw_pickup_locations_to_gold_job")
        for node in defs.resolve_job_def(name).nodes
    }
    assert {checkpoint_pool(name) for name in live_query_names()} == {p for p in steps.values() if p}


def test_in_continuous_mode_the_run_is_kept_alive_the_offset_sensors_rest_and_only_taxi_zones_is_automated() -> None:
    """The definitions as `dagster dev` loads them with LIVE_MODE=continuous (in a process of their own: the mode is
    read when they load)."""
    import json
    import os
    import subprocess
    import sys

    script = (
        "import json; from streaming_pipeline.definitions import defs; "
        "print(json.dumps({'sensors': {s.name: s.default_status.value for s in defs.sensors}, "
        "'automated': sorted(a.key.to_user_string() for a in defs.resolve_asset_graph().asset_nodes "
        "if a.automation_condition is not None)}))"
    )
    env = {**os.environ, "LIVE_MODE": "continuous"}
    done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    loaded = json.loads(done.stdout.strip().splitlines()[-1])
    assert loaded["sensors"] == {
        "continuous_streams_sensor": "RUNNING",
        "default_automation_condition_sensor": "RUNNING",
        "raw_rides_offset_sensor": "STOPPED",
        "raw_pickup_locations_offset_sensor": "STOPPED",
    }
    assert loaded["automated"] == ["taxi_zones"]
