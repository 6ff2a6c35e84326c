"""A Delta table's log read as files, Spark-free: its versions and its commits' info.

`DESCRIBE HISTORY` is a Spark job (a few hundred milliseconds on a warm engine, more under load), and a bronze
run asked it several times around a micro-batch of one ride. The same facts are in the table's `_delta_log`:
one JSON file per version, whose `commitInfo` action holds the operation, its metrics and the writer's
`userMetadata`. Files are read through fsspec, so a lakehouse given as a plain path, a `file://` URI or an
object-store URI (`s3a://`, with s3fs installed) reads the same way. Used by the sensors and checks (which must
not load Spark), by the bronze runs and by the foreachBatch handlers (which run in a Python worker of the Spark
Connect server, next to the engine).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from streaming_pipeline.errors import StorageError


def filesystem(uri: str) -> tuple[Any, str]:
    """(fsspec filesystem, path within it) for a plain path or a URI; s3a:// and s3n:// read as s3://."""
    import fsspec
    from fsspec.core import url_to_fs

    if uri.startswith(("s3a://", "s3n://")):
        uri = "s3://" + uri.split("://", 1)[1]
    elif uri.startswith("file:") and not uri.startswith("file://"):
        uri = uri.removeprefix("file:")
    try:
        return url_to_fs(uri)
    except (ImportError, ValueError) as exc:
        protocol = uri.split("://", 1)[0]
        raise StorageError(
            f"cannot read {uri}: no filesystem for '{protocol}://' ({exc}); install the fsspec backend for it "
            f"(for example s3fs for s3a://), fsspec {fsspec.__version__}"
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


def _log(table_uri: str) -> tuple[Any, str, list[int]]:
    fs, log_dir = filesystem(table_uri.rstrip("/") + "/_delta_log")
    return fs, log_dir, numbered_files(fs, log_dir, ".json")


def latest_version(table_uri: str) -> int | None:
    """The table's newest version; None when there is no Delta table at `table_uri`."""
    versions = _log(table_uri)[2]
    return versions[-1] if versions else None


def commits(table_uri: str, *, after: int | None = None) -> Iterator[Commit] | None:
    """The table's commits newer than version `after` (all without it), newest first and read lazily; None when
    there is no Delta table at `table_uri`. Versions whose JSON file log cleanup removed are not listed."""
    fs, log_dir, versions = _log(table_uri)
    if not versions:
        return None

    def read() -> Iterator[Commit]:
        for version in reversed(versions):
            if after is not None and version <= after:
                return
            with fs.open(f"{log_dir}/{version:020d}.json", "r") as handle:
                info: dict[str, Any] = next(
                    (action["commitInfo"] for line in handle if "commitInfo" in (action := json.loads(line))), {}
                )
            yield _commit(version, info)

    return read()


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
    """Batches `app_id` committed to the table at `path` after `version` (all without it), oldest first.

    Reads the Delta log's newest commit files only, so that a run's cost follows its own commits, not the
    table's history.
    """
    found = [
        BatchCounts(int(c.user_metadata["batch_id"]), c.output_rows, c.user_metadata)
        for c in commits(path, after=version) or []
        if c.user_metadata and c.user_metadata.get("app_id") == app_id
    ]
    return sorted(found, key=lambda b: b.batch_id)
