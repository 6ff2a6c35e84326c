"""What Delta's log cleanup does to a table, done at once: a checkpoint at the newest version, then the commit
files older than it deleted (Delta deletes them once they are older than delta.logRetentionDuration, 30 days)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def clean_log(path: str | Path) -> int:
    """Delete the commit files older than the table's newest checkpoint, as log cleanup does; its version. `path`
    is a directory or a URI the Delta log reader takes (s3a://...)."""
    from streaming_pipeline.lakehouse.engine.delta_log import filesystem

    fs, table = filesystem(str(path))
    log_dir = f"{table}/_delta_log"
    with fs.open(f"{log_dir}/_last_checkpoint", "r") as handle:
        checkpoint = int(json.load(handle)["version"])
    for entry in fs.ls(log_dir, detail=False):
        name = entry.rstrip("/").rsplit("/", 1)[-1]
        if name.endswith(".json") and int(name.split(".")[0]) < checkpoint:
            stem = name.removesuffix(".json")
            for doomed in (name, f".{name}.crc", f"{stem}.crc"):
                if fs.exists(f"{log_dir}/{doomed}"):
                    fs.rm(f"{log_dir}/{doomed}")
    return checkpoint


def checkpoint_and_clean(spark: Any, path: str | Path) -> int:
    """Make Delta write a checkpoint at the table's newest version (a property commit with a checkpoint interval
    of 1 is checkpointed, and so is every commit after it), then clean the log up to it; the checkpoint's version."""
    spark.sql(f"ALTER TABLE delta.`{path}` SET TBLPROPERTIES ('delta.checkpointInterval' = '1')")
    return clean_log(path)
