"""Errors of the schema registry server, each carrying Confluent's HTTP status and error code."""

from __future__ import annotations

from streaming_pipeline.devstack.errors import InvalidSchemaError, RegistryError

__all__ = ["InvalidSchemaError", "RegistryError"]

# Confluent Schema Registry error codes (see Confluent's REST API reference).
SUBJECT_NOT_FOUND = 40401
VERSION_NOT_FOUND = 40402
SCHEMA_NOT_FOUND = 40403
SUBJECT_SOFT_DELETED = 40404
SUBJECT_NOT_SOFT_DELETED = 40405
VERSION_SOFT_DELETED = 40406
VERSION_NOT_SOFT_DELETED = 40407
SUBJECT_LEVEL_COMPATIBILITY_NOT_CONFIGURED = 40408
INCOMPATIBLE_SCHEMA = 409
INVALID_SCHEMA = 42201
INVALID_VERSION = 42202
INVALID_COMPATIBILITY_LEVEL = 42203
REFERENCE_EXISTS = 42206
STORE_ERROR = 50001


def subject_not_found(subject: str) -> RegistryError:
    return RegistryError(404, SUBJECT_NOT_FOUND, f"Subject '{subject}' not found.")


def version_not_found(subject: str, version: object) -> RegistryError:
    return RegistryError(404, VERSION_NOT_FOUND, f"Version {version} not found for subject '{subject}'.")


def schema_not_found(detail: str = "Schema not found") -> RegistryError:
    return RegistryError(404, SCHEMA_NOT_FOUND, detail)


def invalid_schema(detail: str) -> RegistryError:
    return RegistryError(422, INVALID_SCHEMA, f"Invalid schema: {detail}")


def invalid_version(version: object) -> RegistryError:
    return RegistryError(
        422,
        INVALID_VERSION,
        f"The specified version '{version}' is not a valid version id. "
        'Allowed values are between [1, 2^31-1] and the string "latest"',
    )


def invalid_compatibility_level(value: object) -> RegistryError:
    return RegistryError(
        422,
        INVALID_COMPATIBILITY_LEVEL,
        f"Invalid compatibility level {value!r}. Valid values are none, backward, forward, full, "
        "backward_transitive, forward_transitive, and full_transitive",
    )


def reference_exists(subject: str, version: int) -> RegistryError:
    return RegistryError(
        422,
        REFERENCE_EXISTS,
        f"One or more references exist to the schema {{magic=1,keytype=SCHEMA,subject={subject},version={version}}}.",
    )


def request_too_large(limit: int) -> RegistryError:
    return RegistryError(413, 413, f"The request body is larger than the limit of {limit} bytes")


def store_error(detail: str) -> RegistryError:
    return RegistryError(500, STORE_ERROR, f"Error in the backend data store: {detail}")
