"""Spark resource: one SparkSession per run, configured from a `spark_conf/` profile."""

from __future__ import annotations

import importlib.metadata
import os
from pathlib import Path
from typing import Any

import dagster as dg
from pydantic import Field, PrivateAttr

from streaming_pipeline.errors import ConfigurationError

PROFILES = ("local", "cluster")
SCALA_BINARY_VERSION = "2.13"


def spark_conf_dir() -> Path:
    override = os.environ.get("STREAMING_PIPELINE_SPARK_CONF_DIR")
    return Path(override) if override else Path(__file__).resolve().parents[2] / "spark_conf"


def read_profile(profile: str) -> dict[str, str]:
    """Settings of `spark_conf/<profile>.conf` (spark-defaults.conf format)."""
    if profile not in PROFILES:
        raise ConfigurationError(f"Spark profile {profile!r} is unknown; choose one of {', '.join(PROFILES)}")
    path = spark_conf_dir() / f"{profile}.conf"
    if not path.is_file():
        raise ConfigurationError(f"Spark profile file not found: {path}")
    settings: dict[str, str] = {}
    for number, line in enumerate(path.read_text().splitlines(), start=1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        parts = line.split(None, 1)
        if len(parts) != 2:
            raise ConfigurationError(f"{path}:{number}: expected 'key value', got {line!r}")
        settings[parts[0]] = parts[1].strip()
    return settings


def maven_packages() -> list[str]:
    """Delta, Kafka source and Avro jars matching the installed pyspark and delta-spark exactly."""
    spark_version = importlib.metadata.version("pyspark")
    delta_version = importlib.metadata.version("delta-spark")
    return [
        f"io.delta:delta-spark_{SCALA_BINARY_VERSION}:{delta_version}",
        f"org.apache.spark:spark-sql-kafka-0-10_{SCALA_BINARY_VERSION}:{spark_version}",
        f"org.apache.spark:spark-avro_{SCALA_BINARY_VERSION}:{spark_version}",
    ]


class SparkResource(dg.ConfigurableResource):
    """Builds the run's SparkSession on first use and stops it when the run ends.

    `profile` picks `spark_conf/<profile>.conf`; `master` (SPARK_MASTER) overrides its master;
    `conf` overrides single settings.
    """

    profile: str = Field(default="local", description="local or cluster (see spark_conf/).")
    master: str | None = Field(default=None, description="Spark master URL; required by the cluster profile.")
    conf: dict[str, str] = Field(default_factory=dict, description="Extra Spark settings, applied last.")
    stop_on_teardown: bool = Field(
        default=True, description="Stop the session when the run ends (tests sharing one session set False)."
    )

    _session: Any = PrivateAttr(default=None)

    def session_conf(self) -> dict[str, str]:
        settings = read_profile(self.profile)
        if self.master:
            settings["spark.master"] = self.master
        if "spark.master" not in settings:
            raise ConfigurationError(
                f"Spark profile {self.profile!r} has no master: set SPARK_MASTER (e.g. spark://host:7077)"
            )
        packages = maven_packages()
        extra = settings.get("spark.jars.packages")
        settings["spark.jars.packages"] = ",".join(packages + ([extra] if extra else []))
        settings.update(self.conf)
        return settings

    def get_session(self):  # -> pyspark.sql.SparkSession
        if self._session is None:
            from pyspark.sql import SparkSession

            builder = SparkSession.builder.appName("streaming-pipeline")
            for key, value in self.session_conf().items():
                builder = builder.config(key, value)
            self._session = builder.getOrCreate()
            self._session.sparkContext.setLogLevel("WARN")
        return self._session

    def teardown_after_execution(self, context: dg.InitResourceContext) -> None:
        if self._session is not None and self.stop_on_teardown:
            self._session.stop()
            self._session = None
