"""SQLite persistence of the registry: schemas (global ids), subject versions, configs.

One connection per store, guarded by a lock; every write runs in its own
`BEGIN IMMEDIATE` transaction, so ids stay unique even when two processes
share a data directory.
"""

from __future__ import annotations

import contextlib
import json
import sqlite3
import threading
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

DB_FILE_NAME = "registry.sqlite3"
GLOBAL_SCOPE = "global"

_SCHEMA_DDL = """
CREATE TABLE IF NOT EXISTS schemas (
    id          INTEGER PRIMARY KEY AUTOINCREMENT,
    fingerprint TEXT NOT NULL UNIQUE,
    schema_type TEXT NOT NULL,
    schema      TEXT NOT NULL,
    refs        TEXT NOT NULL,
    guid        TEXT NOT NULL UNIQUE
);
CREATE TABLE IF NOT EXISTS subject_versions (
    subject   TEXT NOT NULL,
    version   INTEGER NOT NULL,
    schema_id INTEGER NOT NULL REFERENCES schemas(id),
    deleted   INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (subject, version)
);
CREATE INDEX IF NOT EXISTS subject_versions_by_schema ON subject_versions (schema_id);
CREATE TABLE IF NOT EXISTS config (
    scope         TEXT PRIMARY KEY,
    compatibility TEXT NOT NULL
);
"""


@dataclass(frozen=True)
class StoredSchema:
    id: int
    schema_type: str
    schema: str
    references: list[dict]
    guid: str


@dataclass(frozen=True)
class SubjectVersion:
    subject: str
    version: int
    schema_id: int
    deleted: bool


class Store:
    """Persistent tables of the registry in `<data_dir>/registry.sqlite3`."""

    def __init__(self, data_dir: Path) -> None:
        self.data_dir = Path(data_dir)
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.path = self.data_dir / DB_FILE_NAME
        self.lock = threading.RLock()
        self._conn = sqlite3.connect(self.path, timeout=30.0, isolation_level=None, check_same_thread=False)
        self._conn.row_factory = sqlite3.Row
        self._conn.execute("PRAGMA journal_mode=WAL")
        self._conn.execute("PRAGMA synchronous=FULL")
        self._conn.execute("PRAGMA foreign_keys=ON")
        with self.lock:
            self._conn.executescript(_SCHEMA_DDL)

    def close(self) -> None:
        with self.lock:
            self._conn.close()

    @contextlib.contextmanager
    def transaction(self) -> Iterator[sqlite3.Connection]:
        """A write transaction, holding the in-process lock and SQLite's write lock."""
        with self.lock:
            self._conn.execute("BEGIN IMMEDIATE")
            try:
                yield self._conn
            except BaseException:
                self._conn.execute("ROLLBACK")
                raise
            else:
                self._conn.execute("COMMIT")

    @contextlib.contextmanager
    def read(self) -> Iterator[sqlite3.Connection]:
        """A consistent read snapshot."""
        with self.lock:
            self._conn.execute("BEGIN")
            try:
                yield self._conn
            finally:
                self._conn.execute("COMMIT")

    # -- schemas -----------------------------------------------------------------

    @staticmethod
    def _schema_from_row(row: sqlite3.Row | None) -> StoredSchema | None:
        if row is None:
            return None
        return StoredSchema(
            id=row["id"],
            schema_type=row["schema_type"],
            schema=row["schema"],
            references=json.loads(row["refs"]),
            guid=row["guid"],
        )

    def schema_by_id(self, conn: sqlite3.Connection, schema_id: int) -> StoredSchema | None:
        row = conn.execute("SELECT * FROM schemas WHERE id = ?", (schema_id,)).fetchone()
        return self._schema_from_row(row)

    def schema_by_guid(self, conn: sqlite3.Connection, guid: str) -> StoredSchema | None:
        row = conn.execute("SELECT * FROM schemas WHERE guid = ?", (guid,)).fetchone()
        return self._schema_from_row(row)

    def schema_by_fingerprint(self, conn: sqlite3.Connection, fingerprint: str) -> StoredSchema | None:
        row = conn.execute("SELECT * FROM schemas WHERE fingerprint = ?", (fingerprint,)).fetchone()
        return self._schema_from_row(row)

    def schemas_with_references(self, conn: sqlite3.Connection) -> list[StoredSchema]:
        rows = conn.execute("SELECT * FROM schemas WHERE refs != '[]' ORDER BY id").fetchall()
        return [stored for stored in map(self._schema_from_row, rows) if stored is not None]

    def insert_schema(
        self, conn: sqlite3.Connection, fingerprint: str, schema_type: str, schema: str, references: list[dict]
    ) -> StoredSchema:
        cursor = conn.execute(
            "INSERT INTO schemas (fingerprint, schema_type, schema, refs, guid) VALUES (?, ?, ?, ?, ?)",
            (fingerprint, schema_type, schema, json.dumps(references), str(uuid.uuid4())),
        )
        row_id = cursor.lastrowid
        assert row_id is not None  # set by a successful INSERT
        stored = self.schema_by_id(conn, row_id)
        assert stored is not None
        return stored

    # -- subject versions ----------------------------------------------------------

    @staticmethod
    def _version_from_row(row: sqlite3.Row) -> SubjectVersion:
        return SubjectVersion(
            subject=row["subject"], version=row["version"], schema_id=row["schema_id"], deleted=bool(row["deleted"])
        )

    def versions(self, conn: sqlite3.Connection, subject: str, include_deleted: bool) -> list[SubjectVersion]:
        """The versions of `subject`, oldest first."""
        sql = "SELECT * FROM subject_versions WHERE subject = ?"
        if not include_deleted:
            sql += " AND deleted = 0"
        rows = conn.execute(sql + " ORDER BY version", (subject,)).fetchall()
        return [self._version_from_row(row) for row in rows]

    def versions_of_schema(
        self, conn: sqlite3.Connection, schema_id: int, include_deleted: bool
    ) -> list[SubjectVersion]:
        sql = "SELECT * FROM subject_versions WHERE schema_id = ?"
        if not include_deleted:
            sql += " AND deleted = 0"
        rows = conn.execute(sql + " ORDER BY subject, version", (schema_id,)).fetchall()
        return [self._version_from_row(row) for row in rows]

    def subjects(self, conn: sqlite3.Connection) -> list[tuple[str, bool]]:
        """Every subject with at least one version, and whether all its versions are soft-deleted."""
        rows = conn.execute(
            "SELECT subject, MIN(deleted) AS all_deleted FROM subject_versions GROUP BY subject ORDER BY subject"
        ).fetchall()
        return [(row["subject"], bool(row["all_deleted"])) for row in rows]

    def max_version(self, conn: sqlite3.Connection, subject: str) -> int:
        row = conn.execute("SELECT MAX(version) AS v FROM subject_versions WHERE subject = ?", (subject,)).fetchone()
        return int(row["v"] or 0)

    def insert_version(self, conn: sqlite3.Connection, subject: str, version: int, schema_id: int) -> None:
        conn.execute(
            "INSERT INTO subject_versions (subject, version, schema_id, deleted) VALUES (?, ?, ?, 0)",
            (subject, version, schema_id),
        )

    def soft_delete_versions(self, conn: sqlite3.Connection, subject: str, versions: list[int]) -> None:
        conn.executemany(
            "UPDATE subject_versions SET deleted = 1 WHERE subject = ? AND version = ?",
            [(subject, version) for version in versions],
        )

    def hard_delete_versions(self, conn: sqlite3.Connection, subject: str, versions: list[int]) -> None:
        conn.executemany(
            "DELETE FROM subject_versions WHERE subject = ? AND version = ?",
            [(subject, version) for version in versions],
        )

    # -- config --------------------------------------------------------------------

    @staticmethod
    def _scope(subject: str | None) -> str:
        return GLOBAL_SCOPE if subject is None else "subject:" + subject

    def get_config(self, conn: sqlite3.Connection, subject: str | None) -> str | None:
        row = conn.execute("SELECT compatibility FROM config WHERE scope = ?", (self._scope(subject),)).fetchone()
        return None if row is None else str(row["compatibility"])

    def set_config(self, conn: sqlite3.Connection, subject: str | None, compatibility: str) -> None:
        conn.execute(
            "INSERT INTO config (scope, compatibility) VALUES (?, ?) "
            "ON CONFLICT(scope) DO UPDATE SET compatibility = excluded.compatibility",
            (self._scope(subject), compatibility),
        )

    def delete_config(self, conn: sqlite3.Connection, subject: str | None) -> None:
        conn.execute("DELETE FROM config WHERE scope = ?", (self._scope(subject),))
