"""A Delta table's log read as files, Spark-free: its newest version, its recent commits and its transactions.

`DESCRIBE HISTORY` is a Spark job (a few hundred milliseconds on a warm engine, more under load), and the sensors
and checks must not load Spark at all. The same facts are in the table's `_delta_log` (Delta's PROTOCOL.md):

- `_last_checkpoint` names the newest checkpoint, a Parquet file holding the table's state at that version,
  including every `txn` action (appId, version, lastUpdated): the idempotent writers' positions;
- after it come the JSON commits, one per version, each with its `commitInfo` (operation, metrics and the
  writer's `userMetadata`) and any new `txn` action.

Everything here starts from `_last_checkpoint` and reads forward, one file per version, so that a read costs the
same at version 100 and at version 100,000, and never lists `_delta_log` (a listing grows with the history, on
object stores too). Checkpoints keep `txn` actions but not `commitInfo`, and log cleanup deletes JSON commits
older than `delta.logRetentionDuration` once a checkpoint covers them: what must survive cleanup (what a writer
has committed) is read from the transactions, and `userMetadata` only serves what is recent (a run's own
commits) or is history.

Files are read through fsspec, so a lakehouse given as a plain path, a `file://` URI or an object-store URI
(`s3a://` through pyarrow's S3 client) reads the same way. Used by the sensors and checks, by the bronze runs and by the
foreachBatch handlers (which run in a Python worker of the Spark Connect server, next to the engine).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from streaming_pipeline.lakehouse.engine.object_store import is_object_store, s3_filesystem
from streaming_pipeline.lakehouse.errors import StorageError


def filesystem(uri: str) -> tuple[Any, str]:
    """(fsspec filesystem, path within it) for a plain path or a URI. s3://, s3a:// and s3n:// read through
    pyarrow's S3 client (no second S3 library), set up from the variables every S3 client reads."""
    import fsspec
    from fsspec.core import url_to_fs

    if is_object_store(uri):
        return s3_filesystem(), uri.split("://", 1)[1]
    if uri.startswith("file:") and not uri.startswith("file://"):
        uri = uri.removeprefix("file:")
    try:
        return url_to_fs(uri)
    except (ImportError, ValueError) as exc:
        protocol = uri.split("://", 1)[0]
        raise StorageError(
            f"cannot read {uri}: no filesystem for '{protocol}://' ({exc}); install the fsspec backend for it "
            f"(for example gcsfs for gs://), fsspec {fsspec.__version__}"
        ) from exc


def read_text(uri: str) -> str | None:
    """The text of the file at `uri`; None when it does not exist."""
    fs, path = filesystem(uri)
    try:
        with fs.open(path, "r") as handle:
            return str(handle.read())
    except FileNotFoundError:
        return None


def numbered_files(fs: Any, directory: str, suffix: str = "") -> list[int]:
    """The integer names (without `suffix`) of the files in `directory`, ascending; [] when it is missing."""
    try:
        names = [str(entry).rstrip("/").rsplit("/", 1)[-1] for entry in fs.ls(directory, detail=False)]
    except FileNotFoundError:
        return []
    stems = [n.removesuffix(suffix) for n in names if n.endswith(suffix)]
    return sorted(int(s) for s in stems if s.isdigit())


@dataclass(frozen=True)
class Commit:
    """One version of a Delta table: its operation, the rows it wrote and the writer's `userMetadata`."""

    version: int
    operation: str
    output_rows: int
    user_metadata: dict[str, Any] | None


@dataclass(frozen=True)
class Transaction:
    """A `txn` action: the newest version an idempotent writer (`app_id`) committed, and when (epoch ms)."""

    app_id: str
    version: int
    last_updated: int | None = None


class DeltaLog:
    """The `_delta_log` of the table at `table_uri`, read from its newest checkpoint forward."""

    def __init__(self, table_uri: str) -> None:
        self.table_uri = table_uri.rstrip("/")
        self.fs, self.log_dir = filesystem(self.table_uri + "/_delta_log")

    def _commit_path(self, version: int) -> str:
        return f"{self.log_dir}/{version:020d}.json"

    def last_checkpoint(self) -> dict[str, Any] | None:
        """The `_last_checkpoint` hint (version, parts, ...); None before the first checkpoint."""
        try:
            with self.fs.open(f"{self.log_dir}/_last_checkpoint", "r") as handle:
                text = str(handle.read())
        except FileNotFoundError:
            return None
        hint = json.loads(text.strip().splitlines()[0]) if text.strip() else None
        return hint if isinstance(hint, dict) and "version" in hint else None

    def latest_version(self) -> int | None:
        """The newest version; None when there is no Delta table at `table_uri`.

        From the newest checkpoint, one existence test per later commit (Delta writes a checkpoint every
        `delta.checkpointInterval` commits, 10 by default): the cost does not grow with the history.
        """
        hint = self.last_checkpoint()
        start = int(hint["version"]) if hint else -1
        if not self.fs.exists(self._commit_path(start + 1)):
            if start >= 0:
                return self._newer_checkpoint_version(start)
            return None
        version = start + 1
        while self.fs.exists(self._commit_path(version + 1)):
            version += 1
        return version

    def _newer_checkpoint_version(self, hinted: int) -> int:
        """The newest version when no commit follows the hinted checkpoint: that checkpoint's version, unless
        `_last_checkpoint` is stale (a writer died between a checkpoint and its hint, and cleanup removed the
        commits in between), which only a listing can tell; rare, so the listing is paid only then."""
        if self.fs.exists(f"{self.log_dir}/{hinted:020d}.checkpoint.parquet") or self.fs.exists(
            self._commit_path(hinted)
        ):
            return hinted
        versions = numbered_files(self.fs, self.log_dir, ".json")
        return versions[-1] if versions else hinted

    def actions(self, version: int) -> list[dict[str, Any]] | None:
        """The actions of commit `version`; None when its file is gone (cleanup) or not yet written."""
        try:
            with self.fs.open(self._commit_path(version), "r") as handle:
                return [json.loads(line) for line in handle if line.strip()]
        except FileNotFoundError:
            return None

    def commit(self, version: int) -> Commit | None:
        """Commit `version`, from its JSON file; None when the file is gone (log cleanup)."""
        actions = self.actions(version)
        if actions is None:
            return None
        info: dict[str, Any] = next((a["commitInfo"] for a in actions if "commitInfo" in a), {})
        return _commit(version, info)

    def commits(self, *, after: int | None = None, latest: int | None = None) -> Iterator[Commit]:
        """The commits newer than version `after`, newest first and read lazily, from `latest` (default: the newest
        version) down; the walk stops at the first version whose file log cleanup removed."""
        newest = self.latest_version() if latest is None else latest
        if newest is None:
            return
        for version in range(newest, -1 if after is None else after, -1):
            commit = self.commit(version)
            if commit is None:
                return
            yield commit

    def transactions(self, *, version: int | None = None) -> dict[str, Transaction]:
        """Every idempotent writer's newest `txn` at `version` (default: the newest version): the checkpoint's,
        then the commits after it. {} when there is no table."""
        hint = self.last_checkpoint()
        newest = self.latest_version() if version is None else version
        if newest is None:
            return {}
        found: dict[str, Transaction] = {}
        start = 0
        if hint is not None and int(hint["version"]) <= newest:
            start = int(hint["version"]) + 1
            for txn in self._checkpoint_transactions(hint):
                found[txn.app_id] = txn
        for commit_version in range(start, newest + 1):
            actions = self.actions(commit_version)
            if actions is None:
                raise StorageError(
                    f"the Delta log of {self.table_uri} has no commit {commit_version} after its checkpoint "
                    f"{start - 1}: the log is incomplete (was a commit file deleted by hand?)"
                )
            for action in actions:
                if "txn" in action:
                    txn = _transaction(action["txn"])
                    found[txn.app_id] = txn
        return found

    def _checkpoint_transactions(self, hint: dict[str, Any]) -> list[Transaction]:
        """The `txn` actions of the checkpoint `_last_checkpoint` names (one file, or `parts` files)."""
        import pyarrow.parquet as pq

        version = int(hint["version"])
        if "v2Checkpoint" in hint:
            raise StorageError(
                f"{self.table_uri}: checkpoint {version} is a V2 checkpoint, which this reader does not read; "
                "keep the table's default classic checkpoints (delta.checkpointPolicy = classic)"
            )
        parts = int(hint.get("parts") or 0)
        names = (
            [f"{version:020d}.checkpoint.{part:010d}.{parts:010d}.parquet" for part in range(1, parts + 1)]
            if parts
            else [f"{version:020d}.checkpoint.parquet"]
        )
        found: list[Transaction] = []
        for name in names:
            with self.fs.open(f"{self.log_dir}/{name}", "rb") as handle:
                column = pq.read_table(handle, columns=["txn"]).column("txn")
            found.extend(_transaction(txn) for txn in column.to_pylist() if txn)
        return found


def _transaction(action: dict[str, Any]) -> Transaction:
    updated = action.get("lastUpdated")
    return Transaction(str(action["appId"]), int(action["version"]), int(updated) if updated is not None else None)


def latest_version(table_uri: str) -> int | None:
    """The table's newest version; None when there is no Delta table at `table_uri`."""
    return DeltaLog(table_uri).latest_version()


def commits(table_uri: str, *, after: int | None = None) -> Iterator[Commit] | None:
    """The table's commits newer than version `after` (all without it, back to the oldest the log keeps), newest
    first and read lazily; None when there is no Delta table at `table_uri`."""
    log = DeltaLog(table_uri)
    latest = log.latest_version()
    if latest is None:
        return None
    return log.commits(after=after, latest=latest)


def transactions(table_uri: str) -> dict[str, Transaction]:
    """The table's idempotent writers and the newest version each committed; {} when there is no table."""
    return DeltaLog(table_uri).transactions()


def _commit(version: int, info: dict[str, Any]) -> Commit:
    metrics = info.get("operationMetrics") or {}
    return Commit(
        version=version,
        operation=str(info.get("operation", "")),
        output_rows=int(metrics.get("numOutputRows") or 0),
        user_metadata=_json_object(info.get("userMetadata")),
    )


def _json_object(text: str | None) -> dict[str, Any] | None:
    if not text:
        return None
    try:
        value = json.loads(text)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


@dataclass
class BatchCounts:
    """One commit a writer made: its batch, the rows it added and its marker."""

    batch_id: int
    rows: int
    marker: dict[str, Any] = field(default_factory=dict)


def commits_since(path: str, version: int | None, app_id: str) -> list[BatchCounts]:
    """Batches `app_id` committed to the table at `path` after `version` (all the log keeps without it), oldest
    first. Reads the commits after `version` only, so that a run's cost follows its own commits."""
    found = [
        BatchCounts(int(c.user_metadata["batch_id"]), c.output_rows, c.user_metadata)
        for c in commits(path, after=version) or []
        if c.user_metadata and c.user_metadata.get("app_id") == app_id
    ]
    return sorted(found, key=lambda b: b.batch_id)
