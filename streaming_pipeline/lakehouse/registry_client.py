"""A Confluent-API schema registry client: confluent-kafka's, with this project's errors. Dagster-free.

It runs where a registry is needed: in the producer, in Dagster's resource (`resources.schema_registry`), and
in the Python worker of the Spark Connect server that calls the bronze foreachBatch handler, which should not
have to import Dagster to decode a micro-batch.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, cast

from confluent_kafka.schema_registry import Schema, SchemaRegistryClient, SchemaRegistryError
from confluent_kafka.schema_registry.avro import AvroDeserializer, AvroSerializer

from streaming_pipeline.lakehouse.errors import CredentialsError, RegistryUnavailableError, SchemaRejectedError

SCHEMA_NOT_FOUND = 40403
_REFUSED = (401, 403)


@dataclass
class RegistryClient:
    """A Confluent-API schema registry: the embedded one, Confluent's, Karapace or Apicurio (ccompat)."""

    url: str
    basic_auth_user_info: str | None = field(default=None, repr=False)
    timeout_seconds: int = 10
    # HTTPS: the CA file of the registry's certificate (else the system's), and for mutual TLS one PEM file with
    # this client's private key and certificate chain.
    ssl_ca_location: str | None = None
    ssl_keystore_location: str | None = None
    _client: SchemaRegistryClient | None = field(default=None, init=False, repr=False, compare=False)

    def client(self) -> SchemaRegistryClient:
        if self._client is None:
            config: dict[str, Any] = {"url": self.url, "timeout": self.timeout_seconds}
            if self.basic_auth_user_info:
                config["basic.auth.user.info"] = self.basic_auth_user_info
            if self.ssl_ca_location:
                config["ssl.ca.location"] = self.ssl_ca_location
            if self.ssl_keystore_location:
                config["ssl.certificate.location"] = self.ssl_keystore_location  # the key is read from it too
            try:
                self._client = SchemaRegistryClient(config)
            except (OSError, ValueError) as exc:  # a CA or keystore file that is not PEM
                raise CredentialsError(
                    f"the TLS files for the schema registry at {self.url} cannot be used: check "
                    f"SCHEMA_REGISTRY_SSL_CA_LOCATION and SCHEMA_REGISTRY_SSL_KEYSTORE_LOCATION ({exc})"
                ) from None
        return self._client

    def _request_failed(self, exc: Exception) -> RegistryUnavailableError | CredentialsError:
        """The error for a request that failed with `exc`: CredentialsError when the registry refused this client
        (HTTP 401 or 403, or a TLS handshake that failed), naming the settings; RegistryUnavailableError else."""
        if isinstance(exc, SchemaRegistryError) and exc.http_status_code in _REFUSED:
            return CredentialsError(
                f"the schema registry at {self.url} refused this client (HTTP {exc.http_status_code}): check "
                "SCHEMA_REGISTRY_BASIC_AUTH_USER_INFO ('user:password')"
                + ("" if self.basic_auth_user_info else ", which is not set")
            )
        reason = f"{type(exc).__name__}: {exc}"
        if "SSL" in reason or "CERTIFICATE" in reason.upper():
            return CredentialsError(
                f"the TLS handshake with the schema registry at {self.url} failed: check "
                f"SCHEMA_REGISTRY_SSL_CA_LOCATION (the CA that signed its certificate) and, for mutual TLS, "
                f"SCHEMA_REGISTRY_SSL_KEYSTORE_LOCATION ({reason})"
            )
        if "RemoteProtocolError" in reason and self.url.startswith("http://"):
            return CredentialsError(
                f"the schema registry at {self.url} closed the connection: does it speak HTTPS? Then "
                f"SCHEMA_REGISTRY_URL starts with https:// ({reason})"
            )
        if "RemoteProtocolError" in reason and not self.ssl_keystore_location:
            return CredentialsError(
                f"the schema registry at {self.url} closed the connection: does it ask for a client certificate "
                f"(mutual TLS)? Then set SCHEMA_REGISTRY_SSL_KEYSTORE_LOCATION ({reason})"
            )
        return RegistryUnavailableError(f"schema registry at {self.url} did not answer: {reason}")

    def register(self, subject: str, schema_str: str) -> int:
        """Register (or find) `schema_str` under `subject`; refuse loudly when the registry rejects it."""
        try:
            return int(self.client().register_schema(subject, Schema(schema_str, "AVRO")))
        except SchemaRegistryError as exc:
            if exc.http_status_code in _REFUSED:
                raise self._request_failed(exc) from None
            raise SchemaRejectedError(
                f"schema registry at {self.url} rejected the schema for subject {subject!r}: "
                f"HTTP {exc.http_status_code}, error {exc.error_code}: {exc.error_message}"
            ) from exc
        except Exception as exc:  # connection refused, timeout: the client raises transport errors as-is
            raise self._request_failed(exc) from exc

    def schema_by_id(self, schema_id: int) -> str | None:
        """Writer schema text for `schema_id`, or None when the registry does not know the id."""
        try:
            return str(self.client().get_schema(schema_id).schema_str)
        except SchemaRegistryError as exc:
            if exc.error_code == SCHEMA_NOT_FOUND or exc.http_status_code == 404:
                return None
            raise self._request_failed(exc) from exc
        except Exception as exc:
            raise self._request_failed(exc) from exc

    def subject_schemas(self, subject: str) -> dict[int, str]:
        """{schema id: schema text} of every version of `subject`, soft-deleted ones included so that
        records written with them stay readable; {} when the subject does not exist."""
        client = self.client()
        try:
            versions = client.get_versions(subject, deleted=True)
            schemas: dict[int, str] = {}
            for version in versions:
                registered = client.get_version(subject, version, deleted=True)
                # RegisteredSchema's fields are Optional; a version read from the registry has both
                schemas[cast(int, registered.schema_id)] = cast(str, registered.schema.schema_str)
            return schemas
        except SchemaRegistryError as exc:
            if exc.http_status_code == 404:
                return {}
            raise self._request_failed(exc) from exc
        except Exception as exc:
            raise self._request_failed(exc) from exc

    def latest(self, subject: str) -> tuple[int, str] | None:
        """(id, schema text) of the newest live version of `subject`, or None when the subject does not exist.

        Asked of the registry each time: the client's own `get_latest_version` caches with no expiry, so a
        long-lived client would never see a version registered later. The version itself is immutable and
        comes from the client's cache.
        """
        client = self.client()
        try:
            versions = client.get_versions(subject)
            if not versions:
                return None
            registered = client.get_version(subject, max(versions))
        except SchemaRegistryError as exc:
            if exc.http_status_code == 404:
                return None
            raise self._request_failed(exc) from exc
        except Exception as exc:
            raise self._request_failed(exc) from exc
        # RegisteredSchema's fields are Optional; a version read from the registry has both
        return cast(int, registered.schema_id), cast(str, registered.schema.schema_str)

    def serializer(self, schema_str: str, *, auto_register: bool = False) -> AvroSerializer:
        """A Confluent-wire-format Avro serializer for `schema_str` (registered beforehand by `register`)."""
        return AvroSerializer(
            self.client(),
            schema_str,
            conf={"auto.register.schemas": auto_register, "use.latest.version": False},
        )

    def deserializer(self, reader_schema_str: str | None = None) -> AvroDeserializer:
        """Decodes with each message's writer schema, resolved to `reader_schema_str` when given."""
        return AvroDeserializer(self.client(), reader_schema_str)
