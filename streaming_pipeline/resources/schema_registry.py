"""Schema Registry resource: configuration for `registry_client.RegistryClient` (confluent-kafka's client), which
is imported when a run first uses it, not when Dagster loads the definitions."""

from __future__ import annotations

from typing import TYPE_CHECKING

import dagster as dg
from pydantic import Field, PrivateAttr

if TYPE_CHECKING:
    from streaming_pipeline.lakehouse.registry_client import RegistryClient


class SchemaRegistryResource(dg.ConfigurableResource):
    """A Confluent-API schema registry: the embedded one, Confluent's, Karapace or Apicurio (ccompat)."""

    url: str = Field(description="Base URL, e.g. http://127.0.0.1:8081.")
    basic_auth_user_info: str | None = Field(
        default=None, description="'key:secret' for registries behind basic auth (Confluent Cloud); use EnvVar."
    )
    ssl_ca_location: str | None = Field(
        default=None, description="SCHEMA_REGISTRY_SSL_CA_LOCATION: the CA file of the registry's HTTPS certificate."
    )
    ssl_keystore_location: str | None = Field(
        default=None,
        description="SCHEMA_REGISTRY_SSL_KEYSTORE_LOCATION: for mutual TLS, a PEM file with the client's private key "
        "and certificate chain.",
    )
    timeout_seconds: int = Field(default=10, description="Bound on each registry request.")

    _client: RegistryClient | None = PrivateAttr(default=None)

    def get_client(self) -> RegistryClient:
        """One client per resource instance, so its schema cache lasts as long as the run."""
        from streaming_pipeline.lakehouse.registry_client import (
            RegistryClient,  # confluent-kafka's client loads in 0.7 s
        )

        if self._client is None:
            self._client = RegistryClient(
                self.url,
                self.basic_auth_user_info,
                self.timeout_seconds,
                ssl_ca_location=self.ssl_ca_location,
                ssl_keystore_location=self.ssl_keystore_location,
            )
        return self._client
