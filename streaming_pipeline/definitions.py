"""The code location: every asset, check, job and sensor under `defs/` (loaded with Dagster's
`load_from_defs_folder`), with the resources and the executor. Configuration is read when definitions load."""

from __future__ import annotations

from pathlib import Path
from typing import TypedDict

import dagster as dg

from streaming_pipeline.resources import KafkaResource, LakehouseResource, SchemaRegistryResource, SparkResource
from streaming_pipeline.settings import (
    KAFKA_SASL_PASSWORD,
    KAFKA_SASL_USERNAME,
    SCHEMA_REGISTRY_BASIC_AUTH_USER_INFO,
    PipelineSettings,
)


class PipelineResources(TypedDict):
    """The resources of `build_resources()`, by key, each with its own type."""

    kafka: KafkaResource
    schema_registry: SchemaRegistryResource
    spark: SparkResource
    lakehouse: LakehouseResource


def build_resources(settings: PipelineSettings) -> PipelineResources:
    """One resource per external system; a secret is passed by reference (`dg.EnvVar`), only when it is set."""
    security = settings.kafka_security
    return {
        "kafka": KafkaResource(
            bootstrap_servers=settings.bootstrap_servers,
            security_protocol=security.security_protocol,
            sasl_mechanism=security.sasl_mechanism,
            sasl_username=dg.EnvVar(KAFKA_SASL_USERNAME) if security.sasl_username_set else None,
            sasl_password=dg.EnvVar(KAFKA_SASL_PASSWORD) if security.sasl_password_set else None,
        ),
        "schema_registry": SchemaRegistryResource(
            url=settings.schema_registry_url,
            basic_auth_user_info=(
                dg.EnvVar(SCHEMA_REGISTRY_BASIC_AUTH_USER_INFO) if settings.registry_basic_auth_set else None
            ),
        ),
        "spark": SparkResource(
            remote=settings.spark_remote, profile=settings.spark_profile, master=settings.spark_master
        ),
        "lakehouse": LakehouseResource(
            root=settings.lakehouse_dir, max_offsets_per_trigger=settings.max_offsets_per_trigger
        ),
    }


def pipeline_definitions() -> dg.Definitions:
    """The assets, checks, jobs and sensors of `defs/`, without resources (for `dg.materialize` in tools and tests)."""
    return dg.load_from_defs_folder(path_within_project=Path(__file__).parent)


def build_definitions(settings: PipelineSettings | None = None) -> dg.Definitions:
    settings = settings or PipelineSettings.from_env()
    return dg.Definitions.merge(
        pipeline_definitions(),
        dg.Definitions(
            resources=build_resources(settings),
            # One process and one Spark session per run: steps share the session instead of each
            # starting a JVM (the multiprocess executor would start one per asset).
            executor=dg.in_process_executor,
        ),
    )


defs = build_definitions()
