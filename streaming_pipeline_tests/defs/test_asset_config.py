"""The assets' parameters are their run config: defaults from the environment, read and checked when definitions
load, and a bad value (from the environment or the launchpad) is an error naming it."""

from __future__ import annotations

import pytest

from streaming_pipeline.defs.gold.ride_window_aggregates import RideWindowsConfig
from streaming_pipeline.defs.silver.amount_branches import AmountBranchesConfig
from streaming_pipeline.defs.silver.ride_pickup_joins import RidePickupJoinsConfig
from streaming_pipeline.defs.silver.taxi_zones import TaxiZonesConfig
from streaming_pipeline.errors import ConfigurationError
from streaming_pipeline.settings import PipelineSettings


def test_the_defaults_are_the_documented_ones() -> None:
    windows, join = RideWindowsConfig(), RidePickupJoinsConfig()
    assert (windows.window_duration, windows.watermark_delay) == ("10 minutes", "15 minutes")
    assert (windows.interval("window_duration"), windows.interval("watermark_delay")) == ("600 seconds", "900 seconds")
    assert (join.interval("join_max_gap"), join.interval("watermark_delay")) == ("600 seconds", "900 seconds")
    assert AmountBranchesConfig().high_amount_threshold == 40.0
    assert TaxiZonesConfig().csv_path is None


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (
            lambda: RideWindowsConfig(window_duration="ten minutes"),
            "ride_window_aggregates window_duration='ten minutes'",
        ),
        (lambda: RideWindowsConfig(watermark_delay="0 seconds"), "ride_window_aggregates watermark_delay='0 seconds'"),
        (lambda: RidePickupJoinsConfig(join_max_gap="10 parsecs"), "ride_pickup_joins join_max_gap='10 parsecs'"),
        (lambda: TaxiZonesConfig(csv_path="/no/such/zones.csv"), "taxi_zones csv_path='/no/such/zones.csv'"),
    ],
)
def test_a_bad_value_from_the_launchpad_is_refused_by_name(make, message: str) -> None:
    with pytest.raises(ConfigurationError, match=message.replace("(", r"\(")):
        make()


@pytest.mark.parametrize(
    ("variable", "value", "message"),
    [
        ("RIDE_WINDOW_DURATION", "10 mins", "RIDE_WINDOW_DURATION='10 mins' is not a positive interval"),
        ("JOIN_MAX_GAP", "-5 minutes", "JOIN_MAX_GAP='-5 minutes' is not a positive interval"),
        ("HIGH_AMOUNT_THRESHOLD", "forty", "HIGH_AMOUNT_THRESHOLD='forty' is not a number"),
        ("TAXI_ZONES_CSV", "/no/such/zones.csv", "TAXI_ZONES_CSV='/no/such/zones.csv': no such file"),
    ],
)
def test_a_bad_default_is_refused_when_definitions_load(variable: str, value: str, message: str) -> None:
    with pytest.raises(ConfigurationError, match=message):
        PipelineSettings.from_env({variable: value})
