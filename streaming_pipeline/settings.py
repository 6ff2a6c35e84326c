"""The environment-variable contract of DESIGN section 4, read when definitions are built.

Every variable is optional; the defaults work with the embedded stack started by
`streaming-pipeline stack up` in the current directory.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from streaming_pipeline.errors import ConfigurationError

DEFAULT_BOOTSTRAP_SERVERS = "127.0.0.1:9092"
DEFAULT_SCHEMA_REGISTRY_URL = "http://127.0.0.1:8081"
DEFAULT_LAKEHOUSE_DIR = ".lakehouse"
DEFAULT_RIDE_WINDOW_DURATION = "10 minutes"
DEFAULT_RIDE_WATERMARK_DELAY = "15 minutes"
DEFAULT_JOIN_MAX_GAP = "10 minutes"
DEFAULT_MAX_OFFSETS_PER_TRIGGER = 1_000_000
DEFAULT_HIGH_AMOUNT_THRESHOLD = 40.0

RIDES_TOPIC = "rides"
PICKUPS_TOPIC = "pickup_locations"

_INTERVAL = re.compile(r"^\s*(\d+)\s+(second|minute|hour|day)s?\s*$", re.IGNORECASE)
_UNIT_SECONDS = {"second": 1, "minute": 60, "hour": 3600, "day": 86400}


def interval_seconds(text: str, *, name: str) -> int:
    """Parse a Spark-style interval such as '10 minutes' into seconds, naming the setting on error."""
    match = _INTERVAL.match(text)
    if not match or int(match.group(1)) <= 0:
        raise ConfigurationError(
            f"{name}={text!r} is not a positive interval; use a number and one of "
            "second(s), minute(s), hour(s), day(s), e.g. '10 minutes'"
        )
    return int(match.group(1)) * _UNIT_SECONDS[match.group(2).lower()]


def normalize_interval(text: str, *, name: str) -> str:
    """Return the interval as Spark expects it ('600 seconds'), after validating it."""
    return f"{interval_seconds(text, name=name)} seconds"


def _lakehouse_dir(value: str) -> str:
    """A URI (s3a://..., file:/...) as it is; a plain path made absolute here. Spark resolves a relative path
    against the working directory of its driver (a Spark Connect server runs in a directory of its own), and the
    sensors and checks read the same path in this process: only an absolute path means the same place to both."""
    if "://" in value or value.startswith("file:"):
        return value
    return str(Path(value).expanduser().resolve())


def _positive_int(env: Mapping[str, str], name: str, default: int) -> int:
    text = env.get(name)
    if not text:
        return default
    if not text.isdigit() or int(text) <= 0:
        raise ConfigurationError(f"{name}={text!r} is not a positive whole number")
    return int(text)


def _number(env: Mapping[str, str], name: str, default: float) -> float:
    text = env.get(name)
    if not text:
        return default
    try:
        return float(text)
    except ValueError:
        raise ConfigurationError(f"{name}={text!r} is not a number (e.g. 40 or 39.5)") from None


def _positive_float(env: Mapping[str, str], name: str, default: float) -> float:
    text = env.get(name)
    if not text:
        return default
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if value <= 0:
        raise ConfigurationError(f"{name}={text!r} is not a positive number")
    return value


@dataclass(frozen=True)
class SensorSettings:
    """When the offset sensors request a run (environment variables `OFFSET_SENSOR_*`)."""

    interval_seconds: int = 2
    min_records: int = 1
    max_wait_seconds: float = 30.0
    retry_backoff_seconds: float = 5.0
    max_backoff_seconds: float = 300.0

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> SensorSettings:
        env = os.environ if environ is None else environ
        defaults = cls()
        return cls(
            interval_seconds=_positive_int(env, "OFFSET_SENSOR_INTERVAL_SECONDS", defaults.interval_seconds),
            min_records=_positive_int(env, "OFFSET_SENSOR_MIN_RECORDS", defaults.min_records),
            max_wait_seconds=_positive_float(env, "OFFSET_SENSOR_MAX_WAIT_SECONDS", defaults.max_wait_seconds),
            retry_backoff_seconds=_positive_float(
                env, "OFFSET_SENSOR_RETRY_BACKOFF_SECONDS", defaults.retry_backoff_seconds
            ),
            max_backoff_seconds=_positive_float(env, "OFFSET_SENSOR_MAX_BACKOFF_SECONDS", defaults.max_backoff_seconds),
        )


@dataclass(frozen=True)
class PipelineSettings:
    bootstrap_servers: str
    schema_registry_url: str
    lakehouse_dir: str
    spark_master: str | None
    spark_remote: str | None
    ride_window_duration: str
    ride_watermark_delay: str
    join_max_gap: str
    max_offsets_per_trigger: int = DEFAULT_MAX_OFFSETS_PER_TRIGGER
    high_amount_threshold: float = DEFAULT_HIGH_AMOUNT_THRESHOLD
    taxi_zones_csv: str | None = None
    sensors: SensorSettings = SensorSettings()

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> PipelineSettings:
        env = os.environ if environ is None else environ
        settings = cls(
            bootstrap_servers=env.get("KAFKA_BOOTSTRAP_SERVERS") or DEFAULT_BOOTSTRAP_SERVERS,
            schema_registry_url=env.get("SCHEMA_REGISTRY_URL") or DEFAULT_SCHEMA_REGISTRY_URL,
            lakehouse_dir=_lakehouse_dir(env.get("LAKEHOUSE_DIR") or DEFAULT_LAKEHOUSE_DIR),
            spark_master=env.get("SPARK_MASTER") or None,
            spark_remote=env.get("SPARK_REMOTE") or None,
            ride_window_duration=env.get("RIDE_WINDOW_DURATION") or DEFAULT_RIDE_WINDOW_DURATION,
            ride_watermark_delay=env.get("RIDE_WATERMARK_DELAY") or DEFAULT_RIDE_WATERMARK_DELAY,
            join_max_gap=env.get("JOIN_MAX_GAP") or DEFAULT_JOIN_MAX_GAP,
            max_offsets_per_trigger=_positive_int(env, "MAX_OFFSETS_PER_TRIGGER", DEFAULT_MAX_OFFSETS_PER_TRIGGER),
            high_amount_threshold=_number(env, "HIGH_AMOUNT_THRESHOLD", DEFAULT_HIGH_AMOUNT_THRESHOLD),
            taxi_zones_csv=env.get("TAXI_ZONES_CSV") or None,
            sensors=SensorSettings.from_env(env),
        )
        for name, value in (
            ("RIDE_WINDOW_DURATION", settings.ride_window_duration),
            ("RIDE_WATERMARK_DELAY", settings.ride_watermark_delay),
            ("JOIN_MAX_GAP", settings.join_max_gap),
        ):
            interval_seconds(value, name=name)
        return settings
