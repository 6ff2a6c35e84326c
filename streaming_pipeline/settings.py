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
DEFAULT_MAX_OFFSETS_PER_TRIGGER = 200_000

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


def _positive_int(env: Mapping[str, str], name: str, default: int) -> int:
    text = env.get(name)
    if not text:
        return default
    if not text.isdigit() or int(text) <= 0:
        raise ConfigurationError(f"{name}={text!r} is not a positive whole number")
    return int(text)


@dataclass(frozen=True)
class PipelineSettings:
    bootstrap_servers: str
    schema_registry_url: str
    lakehouse_dir: str
    spark_master: str | None
    ride_window_duration: str
    ride_watermark_delay: str
    join_max_gap: str
    max_offsets_per_trigger: int = DEFAULT_MAX_OFFSETS_PER_TRIGGER

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> "PipelineSettings":
        env = os.environ if environ is None else environ
        settings = cls(
            bootstrap_servers=env.get("KAFKA_BOOTSTRAP_SERVERS") or DEFAULT_BOOTSTRAP_SERVERS,
            schema_registry_url=env.get("SCHEMA_REGISTRY_URL") or DEFAULT_SCHEMA_REGISTRY_URL,
            lakehouse_dir=env.get("LAKEHOUSE_DIR") or str(Path(DEFAULT_LAKEHOUSE_DIR).resolve()),
            spark_master=env.get("SPARK_MASTER") or None,
            ride_window_duration=env.get("RIDE_WINDOW_DURATION") or DEFAULT_RIDE_WINDOW_DURATION,
            ride_watermark_delay=env.get("RIDE_WATERMARK_DELAY") or DEFAULT_RIDE_WATERMARK_DELAY,
            join_max_gap=env.get("JOIN_MAX_GAP") or DEFAULT_JOIN_MAX_GAP,
            max_offsets_per_trigger=_positive_int(env, "MAX_OFFSETS_PER_TRIGGER", DEFAULT_MAX_OFFSETS_PER_TRIGGER),
        )
        for name, value in (
            ("RIDE_WINDOW_DURATION", settings.ride_window_duration),
            ("RIDE_WATERMARK_DELAY", settings.ride_watermark_delay),
            ("JOIN_MAX_GAP", settings.join_max_gap),
        ):
            interval_seconds(value, name=name)
        return settings
