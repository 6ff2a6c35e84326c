"""Which version of its Delta source a Delta table written by a streaming query holds, read from the table's log
and the query's checkpoint (Spark-free, through fsspec like `engine.delta_log`).

Spark's Delta sink commits every micro-batch with a `txn` action (appId = the query id, which the checkpoint's
`metadata` file holds; version = the batch id), and the checkpoint's `offsets/<batch>` holds where that batch
ended in the source: a Delta source offset (`reservoirVersion`, `index`). So a version of the table can be
pinned to the source version its rows were computed from, while the query goes on writing: what a check that
compares the two tables needs.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from streaming_pipeline.lakehouse.engine.delta_log import DeltaLog, filesystem, numbered_files, read_text

#: The `index` of a Delta source offset that points after the last file of its `reservoirVersion`.
DELTA_END_INDEX = 2**63 - 1


def delta_source_version(offset: dict[str, Any]) -> int | None:
    """The source version up to which a Delta source offset has read every commit and none after; None when the
    offset points inside a version (a micro-batch that stopped at `maxFilesPerTrigger`)."""
    reservoir_version, index = int(offset["reservoirVersion"]), int(offset.get("index", -1))
    if index == -1 and not offset.get("isStartingVersion"):
        return reservoir_version - 1  # before the first file of that version: everything before it is read
    if index == DELTA_END_INDEX:
        return reservoir_version
    return None


def batch_source_offset(checkpoint_dir: str, batch_id: int, table_id: str | None = None) -> dict[str, Any] | None:
    """The Delta source offset where micro-batch `batch_id` ended (`offsets/<batch>`): its first Delta source's, or
    the one of the Delta table whose id is `table_id` (a query streaming several); None when absent."""
    text = read_text(f"{checkpoint_dir.rstrip('/')}/offsets/{batch_id}")
    # v1, then the batch's metadata, then one line per source.
    for line in (text or "").splitlines()[2:]:
        if '"reservoirVersion"' in line:
            offset = dict(json.loads(line))
            if table_id is None or offset.get("reservoirId") == table_id:
                return offset
    return None


@dataclass(frozen=True)
class SinkPosition:
    table_version: int  # a version of the sink table ...
    batch_id: int  # ... committed by this micro-batch of the query ...
    source_version: int  # ... which had read every commit of the source up to this version, and none after


def checkpoint_query_id(checkpoint_dir: str) -> str | None:
    """The query id Spark wrote into the checkpoint when it created it (`metadata`); None before that."""
    text = read_text(checkpoint_dir.rstrip("/") + "/metadata")
    return str(json.loads(text.splitlines()[0])["id"]) if text else None


def checkpoint_last_commit(checkpoint_dir: str) -> int | None:
    """The newest batch id the query committed (its sink had it before the commit file); None when none."""
    fs, path = filesystem(checkpoint_dir.rstrip("/") + "/commits")
    batches = numbered_files(fs, path)
    return batches[-1] if batches else None


def delta_sink_position(
    table_uri: str, checkpoint_dir: str, *, app_id: str | None = None, commits_back: int = 20
) -> SinkPosition | None:
    """The newest version of the sink table at `table_uri` whose rows come from a whole version of the source,
    among its `commits_back` newest commits. Its writer is the `txn` appId `app_id` (default: the query id, which
    Spark's Delta sink uses). None when no such commit is found: none yet, the checkpoint gone or new, or the
    offsets Spark keeps no longer reach back."""
    app_id = app_id or checkpoint_query_id(checkpoint_dir)
    if app_id is None:
        return None
    for version, batch in _writer_commits(table_uri, app_id, commits_back):
        offset = batch_source_offset(checkpoint_dir, batch)
        source_version = delta_source_version(offset) if offset is not None else None
        if source_version is not None:
            return SinkPosition(version, batch, source_version)
    return None


def version_after_batch(table_uri: str, app_id: str, batch_id: int, *, commits_back: int = 20) -> int | None:
    """The version of the table at `table_uri` that holds what writer `app_id` wrote up to micro-batch `batch_id`
    and nothing after: its newest commit of a batch at or before it, among the `commits_back` newest commits."""
    for version, batch in _writer_commits(table_uri, app_id, commits_back):
        if batch <= batch_id:
            return version
    return None


def _writer_commits(table_uri: str, app_id: str, commits_back: int) -> Iterator[tuple[int, int]]:
    """(version, batch id) of the commits of writer `app_id` among the `commits_back` newest, newest first; the
    walk ends where log cleanup removed a commit."""
    log = DeltaLog(table_uri)
    latest = log.latest_version()
    if latest is None:
        return
    for version in range(latest, max(-1, latest - commits_back), -1):
        actions = log.actions(version)
        if actions is None:
            return
        batch = next((int(a["txn"]["version"]) for a in actions if a.get("txn", {}).get("appId") == app_id), None)
        if batch is not None:
            yield version, batch
