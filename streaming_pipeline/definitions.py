"""The code location: the layers' Definitions (bronze, silver, gold) merged, with the resources and the executor;
configuration is read here, when definitions are built."""

from __future__ import annotations

import os
from typing import TypedDict

import dagster as dg

from streaming_pipeline.bronze.definitions import bronze_definitions
from streaming_pipeline.engine.spark import SparkResource
from streaming_pipeline.gold import definitions as gold
from streaming_pipeline.resources import KafkaResource, LakehouseResource, SchemaRegistryResource
from streaming_pipeline.settings import PipelineSettings
from streaming_pipeline.silver import definitions as silver


def _secret(name: str) -> dg.EnvVar | None:
    """A secret passed by reference (never read into the definitions), only when it is set."""
    return dg.EnvVar(name) if os.environ.get(name) else None


class PipelineResources(TypedDict):
    """The resources of `build_resources()`, by key, each with its own type."""

    kafka: KafkaResource
    schema_registry: SchemaRegistryResource
    spark: SparkResource
    lakehouse: LakehouseResource


def build_resources(settings: PipelineSettings) -> PipelineResources:
    return {
        "kafka": KafkaResource(
            bootstrap_servers=settings.bootstrap_servers,
            security_protocol=os.environ.get("KAFKA_SECURITY_PROTOCOL", "PLAINTEXT"),
            sasl_mechanism=os.environ.get("KAFKA_SASL_MECHANISM") or None,
            sasl_username=_secret("KAFKA_SASL_USERNAME"),
            sasl_password=_secret("KAFKA_SASL_PASSWORD"),
        ),
        "schema_registry": SchemaRegistryResource(
            url=settings.schema_registry_url,
            basic_auth_user_info=_secret("SCHEMA_REGISTRY_BASIC_AUTH_USER_INFO"),
        ),
        "spark": SparkResource(
            remote=settings.spark_remote,
            profile="cluster" if settings.spark_master else os.environ.get("SPARK_PROFILE", "local"),
            master=settings.spark_master,
        ),
        "lakehouse": LakehouseResource(
            root=settings.lakehouse_dir,
            ride_window_duration=settings.ride_window_duration,
            ride_watermark_delay=settings.ride_watermark_delay,
            join_max_gap=settings.join_max_gap,
            max_offsets_per_trigger=settings.max_offsets_per_trigger,
            high_amount_threshold=settings.high_amount_threshold,
            taxi_zones_csv_override=settings.taxi_zones_csv,
        ),
    }


def build_definitions(settings: PipelineSettings | None = None) -> dg.Definitions:
    settings = settings or PipelineSettings.from_env()
    return dg.Definitions.merge(
        bronze_definitions(settings.sensors),
        silver.defs,
        gold.defs,
        dg.Definitions(
            resources=build_resources(settings),
            # One process and one Spark session per run: steps share the session instead of each
            # starting a JVM (the multiprocess executor would start one per asset).
            executor=dg.in_process_executor,
        ),
    )


defs = build_definitions()
