"""The four resources configured from the pipeline's settings (environment variables), as the code location binds
them (and a `KafkaDeltaSource` with `resources: from_environment`, in a project whose definitions bind none)."""

from __future__ import annotations

from typing import TypedDict, TypeVar, cast

import dagster as dg

from streaming_pipeline.lakehouse.engine.spark import lakehouse_s3a_conf
from streaming_pipeline.lakehouse.settings import (
    KAFKA_SASL_PASSWORD,
    KAFKA_SASL_USERNAME,
    SCHEMA_REGISTRY_BASIC_AUTH_USER_INFO,
    PipelineSettings,
)
from streaming_pipeline.resources.kafka import KafkaResource
from streaming_pipeline.resources.lakehouse import LakehouseResource
from streaming_pipeline.resources.schema_registry import SchemaRegistryResource
from streaming_pipeline.resources.spark import SparkResource

_Resource = TypeVar("_Resource", bound=dg.ConfigurableResource)


def resolved(resource: _Resource) -> _Resource:
    """`resource` with its secrets (`dg.EnvVar` fields) read from the environment now, for a command that uses it
    outside a Dagster run (the producer, the demo, replay, the benches); a run reads them itself when it starts."""
    return cast(_Resource, resource.process_config_and_initialize())


class PipelineResources(TypedDict):
    """The resources of `build_resources()`, by key, each with its own type."""

    kafka: KafkaResource
    schema_registry: SchemaRegistryResource
    spark: SparkResource
    lakehouse: LakehouseResource


def build_resources(settings: PipelineSettings) -> PipelineResources:
    """One resource per external system; a secret is passed by reference (`dg.EnvVar`), only when it is set.

    Args:
        settings: the pipeline's settings (`PipelineSettings.from_env()`).

    Returns:
        The resources by the keys the assets, checks and sensors ask for."""
    security, registry = settings.kafka_security, settings.registry_security
    return {
        "kafka": KafkaResource(
            bootstrap_servers=settings.bootstrap_servers,
            security_protocol=security.security_protocol,
            sasl_mechanism=security.sasl_mechanism,
            sasl_username=dg.EnvVar(KAFKA_SASL_USERNAME) if security.sasl_username_set else None,
            sasl_password=dg.EnvVar(KAFKA_SASL_PASSWORD) if security.sasl_password_set else None,
            ssl_ca_location=security.ssl_ca_location,
            ssl_keystore_location=security.ssl_keystore_location,
        ),
        "schema_registry": SchemaRegistryResource(
            url=settings.schema_registry_url,
            basic_auth_user_info=dg.EnvVar(SCHEMA_REGISTRY_BASIC_AUTH_USER_INFO) if registry.basic_auth_set else None,
            ssl_ca_location=registry.ssl_ca_location,
            ssl_keystore_location=registry.ssl_keystore_location,
        ),
        "spark": SparkResource(
            remote=settings.spark_remote,
            profile=settings.spark_profile,
            master=settings.spark_master,
            # An engine of the run's own (no SPARK_REMOTE) reaches a lakehouse on s3a:// through S3A.
            conf={} if settings.spark_remote else lakehouse_s3a_conf(settings.lakehouse_dir),
        ),
        "lakehouse": LakehouseResource(
            root=settings.lakehouse_dir, max_offsets_per_trigger=settings.max_offsets_per_trigger
        ),
    }
