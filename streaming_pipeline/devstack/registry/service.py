"""The registry's behaviour (Confluent Schema Registry semantics), independent of HTTP.

Every public method returns the JSON-ready payload of one REST endpoint or raises
`RegistryError` with Confluent's HTTP status and error code.
"""

from __future__ import annotations

import functools
import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from streaming_pipeline.devstack.registry import exceptions as ex
from streaming_pipeline.devstack.registry.compatibility import (
    AVRO,
    DEFAULT_COMPATIBILITY,
    SUPPORTED_SCHEMA_TYPES,
    ParsedSchema,
    Reference,
    compatibility_problems,
    normalize_level,
    parse_references,
    parse_schema,
    versions_to_check,
)
from streaming_pipeline.devstack.registry.exceptions import InvalidSchemaError
from streaming_pipeline.devstack.registry.store import Store, StoredSchema, SubjectVersion

LATEST = -1
MAX_VERSION = 2**31 - 1
MAX_SCHEMA_ID = 2**31 - 1

F = TypeVar("F", bound=Callable[..., Any])


def _store_errors(method: F) -> F:
    """Turn SQLite failures into Confluent's 50001 store error."""

    @functools.wraps(method)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return method(*args, **kwargs)
        except sqlite3.Error as exc:
            raise ex.store_error(f"{type(exc).__name__}: {exc}") from exc

    return wrapper  # type: ignore[return-value]


def parse_version(value: Any) -> int:
    """A version id of a URL: `latest`/-1 -> LATEST, or an int in [1, 2^31-1]; else 42202."""
    text = str(value).strip()
    if text.lower() == "latest":
        return LATEST
    try:
        number = int(text)
    except ValueError:
        raise ex.invalid_version(value) from None
    if number == LATEST:
        return LATEST
    if not 1 <= number <= MAX_VERSION:
        raise ex.invalid_version(value)
    return number


def _schema_fields(stored: StoredSchema) -> dict[str, Any]:
    payload: dict[str, Any] = {}
    if stored.schema_type != AVRO:
        payload["schemaType"] = stored.schema_type
    if stored.references:
        payload["references"] = stored.references
    payload["schema"] = stored.schema
    payload["guid"] = stored.guid
    return payload


class SchemaRegistry:
    """Subjects, versions, global schema ids and compatibility configs over a `Store`."""

    def __init__(self, data_dir: Path) -> None:
        self.store = Store(data_dir)
        self._parsed: dict[int, ParsedSchema] = {}

    def close(self) -> None:
        self.store.close()

    # -- helpers ---------------------------------------------------------------------

    def _resolver(self, conn: sqlite3.Connection) -> Callable[[str, int], tuple[str, list[Reference]]]:
        def resolve(subject: str, version: int) -> tuple[str, list[Reference]]:
            found = self._find_version(self.store.versions(conn, subject, include_deleted=False), version)
            if found is None:
                raise InvalidSchemaError(f"referenced subject {subject!r} version {version} not found")
            stored = self.store.schema_by_id(conn, found.schema_id)
            assert stored is not None
            return stored.schema, list(parse_references(stored.references))

        return resolve

    def _parse_body(self, conn: sqlite3.Connection, body: dict[str, Any]) -> ParsedSchema:
        try:
            references = parse_references(body.get("references"))
            return parse_schema(body.get("schema"), body.get("schemaType"), references, self._resolver(conn))
        except InvalidSchemaError as exc:
            raise ex.invalid_schema(str(exc)) from exc

    def _parsed_by_id(self, conn: sqlite3.Connection, schema_id: int) -> ParsedSchema:
        parsed = self._parsed.get(schema_id)
        if parsed is None:
            stored = self.store.schema_by_id(conn, schema_id)
            if stored is None:
                raise ex.store_error(f"schema id {schema_id} is referenced by a subject version but missing")
            try:
                parsed = parse_schema(
                    stored.schema, stored.schema_type, parse_references(stored.references), self._resolver(conn)
                )
            except InvalidSchemaError as exc:
                raise ex.store_error(f"stored schema id {schema_id} no longer parses: {exc}") from exc
            self._parsed[schema_id] = parsed
        return parsed

    @staticmethod
    def _find_version(versions: list[SubjectVersion], version: int) -> SubjectVersion | None:
        if not versions:
            return None
        if version == LATEST:
            return versions[-1]
        for candidate in versions:
            if candidate.version == version:
                return candidate
        return None

    def _level(self, conn: sqlite3.Connection, subject: str) -> str:
        return self.store.get_config(conn, subject) or self.store.get_config(conn, None) or DEFAULT_COMPATIBILITY

    def _problems(
        self, conn: sqlite3.Connection, level: str, new: ParsedSchema, targets: list[SubjectVersion]
    ) -> list[str]:
        problems: list[str] = []
        for target in targets:
            old = self._parsed_by_id(conn, target.schema_id)
            try:
                problems.extend(compatibility_problems(level, new, old, target.version))
            except InvalidSchemaError as exc:
                raise ex.invalid_schema(str(exc)) from exc
        return problems

    def _referrers(self, conn: sqlite3.Connection, subject: str, version: int) -> list[int]:
        """Ids of the schemas, still live under some subject, that reference `subject` version `version`.

        A reference to "latest" counts for every version of its subject.
        """
        result = []
        for stored in self.store.schemas_with_references(conn):
            for ref in parse_references(stored.references):
                if ref.subject == subject and ref.version in (version, LATEST):
                    if self.store.versions_of_schema(conn, stored.id, include_deleted=False):
                        result.append(stored.id)
                    break
        return result

    def _refuse_if_referenced(self, conn: sqlite3.Connection, subject: str, versions: list[int]) -> None:
        """Confluent's 42206: a version other schemas reference cannot be deleted, softly or permanently."""
        for version in versions:
            if self._referrers(conn, subject, version):
                raise ex.reference_exists(subject, version)

    def _version_payload(self, conn: sqlite3.Connection, found: SubjectVersion) -> dict[str, Any]:
        stored = self.store.schema_by_id(conn, found.schema_id)
        if stored is None:
            raise ex.store_error(f"schema id {found.schema_id} of {found.subject!r} v{found.version} is missing")
        return {"subject": found.subject, "version": found.version, "id": stored.id, **_schema_fields(stored)}

    # -- schemas -----------------------------------------------------------------------

    @staticmethod
    def schema_types() -> list[str]:
        return list(SUPPORTED_SCHEMA_TYPES)

    def _referenced_schema(self, conn: sqlite3.Connection, schema_id: int) -> StoredSchema:
        # ids are Java ints in Confluent's API; SQLite cannot even look up one beyond 64 bits
        if not 1 <= schema_id <= MAX_SCHEMA_ID:
            raise ex.schema_not_found(f"Schema {schema_id} not found")
        stored = self.store.schema_by_id(conn, schema_id)
        if stored is None or not self.store.versions_of_schema(conn, schema_id, include_deleted=True):
            raise ex.schema_not_found(f"Schema {schema_id} not found")
        return stored

    @_store_errors
    def get_schema(self, schema_id: int) -> dict[str, Any]:
        with self.store.read() as conn:
            stored = self._referenced_schema(conn, schema_id)
            return _schema_fields(stored)

    @_store_errors
    def get_schema_by_guid(self, guid: str) -> dict[str, Any]:
        with self.store.read() as conn:
            stored = self.store.schema_by_guid(conn, guid)
            if stored is None or not self.store.versions_of_schema(conn, stored.id, include_deleted=True):
                raise ex.schema_not_found(f"Schema {guid} not found")
            return {"id": stored.id, **_schema_fields(stored)}

    @_store_errors
    def get_schema_versions(self, schema_id: int, include_deleted: bool, subject: str | None) -> list[dict[str, Any]]:
        with self.store.read() as conn:
            self._referenced_schema(conn, schema_id)
            found = self.store.versions_of_schema(conn, schema_id, include_deleted)
            return [
                {"subject": v.subject, "version": v.version} for v in found if subject is None or v.subject == subject
            ]

    @_store_errors
    def get_schema_subjects(self, schema_id: int, include_deleted: bool, subject: str | None) -> list[str]:
        versions = self.get_schema_versions(schema_id, include_deleted, subject)
        return sorted({item["subject"] for item in versions})

    # -- subjects ------------------------------------------------------------------------

    @_store_errors
    def list_subjects(self, prefix: str | None, include_deleted: bool, deleted_only: bool) -> list[str]:
        with self.store.read() as conn:
            subjects = self.store.subjects(conn)
        result = []
        for subject, all_deleted in subjects:
            if prefix and not subject.startswith(prefix):
                continue
            if deleted_only:
                if all_deleted:
                    result.append(subject)
            elif include_deleted or not all_deleted:
                result.append(subject)
        return result

    @_store_errors
    def list_versions(self, subject: str, include_deleted: bool, deleted_only: bool) -> list[int]:
        with self.store.read() as conn:
            versions = self.store.versions(conn, subject, include_deleted or deleted_only)
        if deleted_only:
            versions = [v for v in versions if v.deleted]
        if not versions and not deleted_only:
            raise ex.subject_not_found(subject)
        return [v.version for v in versions]

    @_store_errors
    def get_version(self, subject: str, version_text: str, include_deleted: bool) -> dict[str, Any]:
        version = parse_version(version_text)
        with self.store.read() as conn:
            versions = self.store.versions(conn, subject, include_deleted)
            if not versions:
                raise ex.subject_not_found(subject)
            found = self._find_version(versions, version)
            if found is None:
                raise ex.version_not_found(subject, version_text)
            return self._version_payload(conn, found)

    @_store_errors
    def referenced_by(self, subject: str, version_text: str) -> list[int]:
        version = parse_version(version_text)
        with self.store.read() as conn:
            versions = self.store.versions(conn, subject, include_deleted=False)
            if not versions:
                raise ex.subject_not_found(subject)
            found = self._find_version(versions, version)
            if found is None:
                raise ex.version_not_found(subject, version_text)
            return self._referrers(conn, subject, found.version)

    @_store_errors
    def register(self, subject: str, body: dict[str, Any]) -> dict[str, Any]:
        with self.store.transaction() as conn:
            parsed = self._parse_body(conn, body)
            existing_schema = self.store.schema_by_fingerprint(conn, parsed.fingerprint)
            live = self.store.versions(conn, subject, include_deleted=False)
            if existing_schema is not None:
                for version in live:
                    if version.schema_id == existing_schema.id:
                        return {"id": existing_schema.id}
            level = self._level(conn, subject)
            problems = self._problems(conn, level, parsed, versions_to_check(level, live))
            if problems:
                raise ex.RegistryError(
                    409,
                    ex.INCOMPATIBLE_SCHEMA,
                    f'Schema being registered is incompatible with an earlier schema for subject "{subject}" '
                    f"(compatibility {level}), details: [{', '.join(problems)}]",
                )
            if existing_schema is None:
                existing_schema = self.store.insert_schema(
                    conn,
                    parsed.fingerprint,
                    parsed.schema_type,
                    parsed.canonical,
                    [ref.to_dict() for ref in parsed.references],
                )
                self._parsed[existing_schema.id] = parsed
            self.store.insert_version(conn, subject, self.store.max_version(conn, subject) + 1, existing_schema.id)
            return {"id": existing_schema.id}

    @_store_errors
    def lookup(self, subject: str, body: dict[str, Any], include_deleted: bool) -> dict[str, Any]:
        with self.store.read() as conn:
            versions = self.store.versions(conn, subject, include_deleted)
            if not versions:
                raise ex.subject_not_found(subject)
            parsed = self._parse_body(conn, body)
            stored = self.store.schema_by_fingerprint(conn, parsed.fingerprint)
            matches = [v for v in versions if stored is not None and v.schema_id == stored.id]
            if not matches:
                raise ex.schema_not_found(f"Schema not found under subject '{subject}'")
            live = [v for v in matches if not v.deleted]
            return self._version_payload(conn, (live or matches)[-1])

    @_store_errors
    def delete_subject(self, subject: str, permanent: bool) -> list[int]:
        with self.store.transaction() as conn:
            versions = self.store.versions(conn, subject, include_deleted=True)
            if not versions:
                raise ex.subject_not_found(subject)
            live = [v.version for v in versions if not v.deleted]
            if permanent:
                every = [v.version for v in versions]
                self._refuse_if_referenced(conn, subject, every)
                if live:
                    raise ex.RegistryError(
                        404,
                        ex.SUBJECT_NOT_SOFT_DELETED,
                        f"Subject '{subject}' was not deleted first before being permanently deleted",
                    )
                self.store.hard_delete_versions(conn, subject, every)
                self.store.delete_config(conn, subject)
                return every
            if not live:
                raise ex.RegistryError(
                    404,
                    ex.SUBJECT_SOFT_DELETED,
                    f"Subject '{subject}' was soft deleted. Set permanent=true to delete permanently",
                )
            self._refuse_if_referenced(conn, subject, live)
            self.store.soft_delete_versions(conn, subject, live)
            self.store.delete_config(conn, subject)
            return live

    @_store_errors
    def delete_version(self, subject: str, version_text: str, permanent: bool) -> int:
        version = parse_version(version_text)
        with self.store.transaction() as conn:
            every = self.store.versions(conn, subject, include_deleted=True)
            if not every:
                raise ex.subject_not_found(subject)
            if permanent:
                found = self._find_version(every, version)
                if found is None:
                    raise ex.version_not_found(subject, version_text)
                self._refuse_if_referenced(conn, subject, [found.version])
                if not found.deleted:
                    raise ex.RegistryError(
                        404,
                        ex.VERSION_NOT_SOFT_DELETED,
                        f"Subject '{subject}' Version {found.version} was not deleted first before being "
                        "permanently deleted",
                    )
                self.store.hard_delete_versions(conn, subject, [found.version])
                return found.version
            live = [v for v in every if not v.deleted]
            found = self._find_version(live, version)
            if found is None:
                if version != LATEST and any(v.version == version for v in every):
                    raise ex.RegistryError(
                        404,
                        ex.VERSION_SOFT_DELETED,
                        f"Subject '{subject}' Version {version} was soft deleted. Set permanent=true to delete "
                        "permanently",
                    )
                if not live:
                    raise ex.subject_not_found(subject)
                raise ex.version_not_found(subject, version_text)
            self._refuse_if_referenced(conn, subject, [found.version])
            self.store.soft_delete_versions(conn, subject, [found.version])
            return found.version

    @_store_errors
    def test_compatibility(
        self, subject: str, version_text: str | None, body: dict[str, Any], verbose: bool
    ) -> dict[str, Any]:
        version = None if version_text is None else parse_version(version_text)
        with self.store.read() as conn:
            live = self.store.versions(conn, subject, include_deleted=False)
            level = self._level(conn, subject)
            if version is None:
                parsed = self._parse_body(conn, body)
                targets = versions_to_check(level, live)
            else:
                if not live:
                    raise ex.subject_not_found(subject)
                found = self._find_version(live, version)
                if found is None:
                    raise ex.version_not_found(subject, version_text)
                parsed = self._parse_body(conn, body)
                targets = [] if level == "NONE" else [found]
            problems = self._problems(conn, level, parsed, targets)
        result: dict[str, Any] = {"is_compatible": not problems}
        if verbose:
            result["messages"] = problems
        return result

    # -- config ----------------------------------------------------------------------------

    @staticmethod
    def _requested_level(body: dict[str, Any]) -> str | None:
        raw = body.get("compatibility", body.get("compatibilityLevel"))
        if raw is None:
            return None
        level = normalize_level(raw)
        if level is None:
            raise ex.invalid_compatibility_level(raw)
        return level

    @_store_errors
    def get_global_config(self) -> dict[str, Any]:
        with self.store.read() as conn:
            return {"compatibilityLevel": self.store.get_config(conn, None) or DEFAULT_COMPATIBILITY}

    @_store_errors
    def set_global_config(self, body: dict[str, Any]) -> dict[str, Any]:
        level = self._requested_level(body)
        with self.store.transaction() as conn:
            if level is not None:
                self.store.set_config(conn, None, level)
            return {"compatibility": self.store.get_config(conn, None) or DEFAULT_COMPATIBILITY}

    @_store_errors
    def delete_global_config(self) -> dict[str, Any]:
        with self.store.transaction() as conn:
            previous = self.store.get_config(conn, None) or DEFAULT_COMPATIBILITY
            self.store.delete_config(conn, None)
            return {"compatibilityLevel": previous}

    @_store_errors
    def get_subject_config(self, subject: str, default_to_global: bool) -> dict[str, Any]:
        with self.store.read() as conn:
            level = self.store.get_config(conn, subject)
            if level is None:
                if not default_to_global:
                    raise ex.RegistryError(
                        404,
                        ex.SUBJECT_LEVEL_COMPATIBILITY_NOT_CONFIGURED,
                        f"Subject '{subject}' does not have subject-level compatibility configured",
                    )
                level = self.store.get_config(conn, None) or DEFAULT_COMPATIBILITY
            return {"compatibilityLevel": level}

    @_store_errors
    def set_subject_config(self, subject: str, body: dict[str, Any]) -> dict[str, Any]:
        level = self._requested_level(body)
        with self.store.transaction() as conn:
            if level is not None:
                self.store.set_config(conn, subject, level)
            return {"compatibility": self._level(conn, subject)}

    @_store_errors
    def delete_subject_config(self, subject: str) -> dict[str, Any]:
        with self.store.transaction() as conn:
            previous = self.store.get_config(conn, subject)
            if previous is None:
                raise ex.RegistryError(
                    404,
                    ex.SUBJECT_LEVEL_COMPATIBILITY_NOT_CONFIGURED,
                    f"Subject '{subject}' does not have subject-level compatibility configured",
                )
            self.store.delete_config(conn, subject)
            return {"compatibilityLevel": previous}
