"""The Avro schemas of the project's topics, read from the top-level `schemas/` folder."""

from __future__ import annotations

import os
from pathlib import Path

from streaming_pipeline.errors import ConfigurationError
from streaming_pipeline.settings import PICKUPS_TOPIC, RIDES_TOPIC


def schema_dir() -> Path:
    override = os.environ.get("STREAMING_PIPELINE_SCHEMA_DIR")
    return Path(override) if override else Path(__file__).resolve().parent.parent / "schemas"


def load_schema(file_name: str) -> str:
    path = schema_dir() / file_name
    if not path.is_file():
        raise ConfigurationError(f"Avro schema file not found: {path}")
    return path.read_text()


#: topic -> (key schema file, value schema file) used by the producer.
TOPIC_SCHEMA_FILES: dict[str, tuple[str, str]] = {
    RIDES_TOPIC: ("ride_key.avsc", "ride_value.avsc"),
    PICKUPS_TOPIC: ("pickup_location_key.avsc", "pickup_location_value.avsc"),
}


def key_subject(topic: str) -> str:
    """Topic name strategy, as Confluent's serializers use by default."""
    return f"{topic}-key"


def value_subject(topic: str) -> str:
    return f"{topic}-value"
