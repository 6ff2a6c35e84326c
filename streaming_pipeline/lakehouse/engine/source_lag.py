"""How far a streaming query is behind a Delta table it streams, read from its checkpoint and the table's log
(Spark-free, like `engine.sink_position`).

The checkpoint's `offsets/<batch>` of the newest committed micro-batch says where the query stopped in each of its
sources: a Delta source offset names its table (`reservoirId`, the table's id) and the version it read up to. The
source's commits after that version that add rows are what the query has not read yet; the oldest one's commit time
says for how long.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from streaming_pipeline.lakehouse.engine.delta_log import DeltaLog
from streaming_pipeline.lakehouse.engine.sink_position import (
    batch_source_offset,
    checkpoint_last_commit,
    delta_source_version,
)


@dataclass(frozen=True)
class SourceLag:
    """Where a query stands in one source table."""

    source: str
    latest_version: int | None  # the source's newest version; None while it has no table
    read_version: int  # the newest version the query has read all of; -1 when it has read none
    oldest_unread_at: float | None  # commit time (epoch s) of the oldest unread commit that adds rows; None: none

    def behind_seconds(self, now: float) -> float:
        """For how long rows of the source have waited for the query: 0 when none waits."""
        return 0.0 if self.oldest_unread_at is None else max(0.0, now - self.oldest_unread_at)


def source_lag(checkpoint_dir: str, source: str, source_uri: str, *, now: float | None = None) -> SourceLag:
    """Where the query whose checkpoint is `checkpoint_dir` stands in the Delta table `source` at `source_uri`.

    Reads the checkpoint's newest committed offsets and, from the version after the one read, the source's commits
    up to the first that adds rows (so the cost follows the lag only while nothing is added)."""
    log = DeltaLog(source_uri)
    latest = log.latest_version()
    if latest is None:
        return SourceLag(source, None, -1, None)
    read = _read_version(checkpoint_dir, _table_id(log))
    for version in range(read + 1, latest + 1):
        actions = log.actions(version)
        if actions is None:
            continue  # removed by log cleanup: older than the retention, so long read or long gone
        if any(a.get("add", {}).get("dataChange", False) for a in actions):
            info: dict[str, Any] = next((a["commitInfo"] for a in actions if "commitInfo" in a), {})
            committed = info.get("timestamp")
            at = committed / 1000 if isinstance(committed, int | float) else (now or time.time())
            return SourceLag(source, latest, read, at)
    return SourceLag(source, latest, read, None)


def _table_id(log: DeltaLog) -> str | None:
    """The table's id: from its first commit's `metaData`, or from the newest checkpoint once log cleanup removed
    that commit."""
    actions = log.actions(0)
    if actions is not None:
        return next((str(a["metaData"]["id"]) for a in actions if "metaData" in a), None)
    return _checkpoint_table_id(log, log.last_checkpoint())


def _checkpoint_table_id(log: DeltaLog, checkpoint: dict[str, Any] | None) -> str | None:
    """The table id in the newest checkpoint's metaData (a single-part checkpoint; None for another kind)."""
    if checkpoint is None:
        return None
    import pyarrow.parquet as pq

    path = f"{log.log_dir}/{int(checkpoint['version']):020d}.checkpoint.parquet"
    try:
        with log.fs.open(path, "rb") as handle:
            rows = pq.read_table(handle, columns=["metaData"]).column("metaData").to_pylist()
    except (FileNotFoundError, KeyError):
        return None
    return next((str(r["id"]) for r in rows if r and r.get("id")), None)


def _read_version(checkpoint_dir: str, table_id: str | None) -> int:
    """The newest version of the table `table_id` that the query's last committed micro-batch had read all of;
    -1 when it has committed none (or reads the table under another id: a table created anew)."""
    batch = checkpoint_last_commit(checkpoint_dir)
    offset = None if batch is None else batch_source_offset(checkpoint_dir, batch, table_id)
    if offset is None:
        return -1
    whole = delta_source_version(offset)
    return whole if whole is not None else int(offset["reservoirVersion"]) - 1
