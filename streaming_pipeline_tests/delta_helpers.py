"""What Delta's log cleanup does to a table, done at once: a checkpoint at the newest version, then the commit
files older than it deleted (Delta deletes them once they are older than delta.logRetentionDuration, 30 days)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def clean_log(path: str | Path) -> int:
    """Delete the commit files older than the table's newest checkpoint, as log cleanup does; its version."""
    log_dir = Path(str(path).removeprefix("file:")) / "_delta_log"
    checkpoint = int(json.loads((log_dir / "_last_checkpoint").read_text())["version"])
    for commit in log_dir.glob("*.json"):
        if int(commit.name.split(".")[0]) < checkpoint:
            commit.unlink()
            commit.with_name(f".{commit.name}.crc").unlink(missing_ok=True)
            commit.with_suffix(".crc").unlink(missing_ok=True)
    return checkpoint


def checkpoint_and_clean(spark: Any, path: str | Path) -> int:
    """Make Delta write a checkpoint at the table's newest version (a property commit with a checkpoint interval
    of 1 is checkpointed, and so is every commit after it), then clean the log up to it; the checkpoint's version."""
    spark.sql(f"ALTER TABLE delta.`{path}` SET TBLPROPERTIES ('delta.checkpointInterval' = '1')")
    return clean_log(path)
