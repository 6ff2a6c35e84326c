"""The Dagster instance directory of the embedded stack (DAGSTER_HOME, exported by `stack env`).

Its dagster.yaml makes the live path behave: every concurrency pool (one per streaming checkpoint, see
`asset_metadata.checkpoint_pool`) admits one step at a time, so no two steps of a sensor run, a manual run, a UI
run or the continuous run work on the same checkpoint at once, and a run releases a checkpoint as soon as its step
on it is done; run monitoring marks a run whose process died as failed and frees its pool slots; queued runs are
picked up every second; sensors are evaluated on threads, so one slow tick does not hold the others back. Its
`retention:` block bounds the tick history: the sensors tick ~43,000 times a day (docs/dagster-storage.md); the runs
themselves are deleted by `defs/run_retention.py`.

Storage: SQLite files under DAGSTER_HOME by default; with `stack up --dagster-postgres`, a ``storage:
postgres:`` block puts the run, event-log and schedule storage in the stack's PostgreSQL server
(`embedded.postgres`), whose password libpq reads from the file ``params: passfile:`` names.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

# `retention:` is the tick history kept, in days, by tick status (Dagster's own default: skipped sensor ticks 7
# days, every other tick forever). The offset sensors tick every 5 s each and the automation sensor every 10 s:
# ~43,000 sensor ticks a day, nearly all of them skipped. A success tick is one that requested runs: kept as long
# as those runs (DAGSTER_RUN_RETENTION_DAYS' default); failures (an error in a sensor) as long as failed runs.
DAGSTER_YAML = """\
# Written by `streaming-pipeline stack up` at each start: edits are overwritten.
telemetry:
  enabled: false
nux:
  enabled: false
run_coordinator:
  module: dagster.core.run_coordinator
  class: QueuedRunCoordinator
  config:
    dequeue_interval_seconds: 1
concurrency:
  pools:
    granularity: op
    default_limit: 1
    # A run whose first step waits for a pool is launched all the same (one per pool): its step then queues for the
    # pool, which the continuous run lends to it.
    op_granularity_run_buffer: 1
# A run whose process died (killed, or its code server stopped) is marked failed; its pool slots are freed.
run_monitoring:
  enabled: true
  poll_interval_seconds: 10
  free_slots_after_run_end_seconds: 5
sensors:
  use_threads: true
  num_workers: 4
# Tick history kept, in days, by tick status; finished runs: dagster_run_retention_job (docs/dagster-storage.md).
retention:
  schedule:
    purge_after_days:
      skipped: 7
      success: 30
      failure: 30
      started: 30
  sensor:
    purge_after_days:
      skipped: 1
      success: 7
      failure: 30
      started: 7
"""


def postgres_storage_yaml(postgres_db: Mapping[str, Any]) -> str:
    """The ``storage:`` block for dagster-postgres's ``postgres_db`` settings (scalars written as JSON, which
    YAML reads as they are: paths with spaces or colons stay intact)."""
    lines = ["storage:", "  postgres:", "    postgres_db:"]
    for key, value in postgres_db.items():
        if isinstance(value, Mapping):
            lines.append(f"      {key}:")
            lines.extend(f"        {k}: {json.dumps(v)}" for k, v in value.items())
        else:
            lines.append(f"      {key}: {json.dumps(value)}")
    return "\n".join(lines) + "\n"


def write_dagster_yaml(dagster_home: Path, postgres_db: Mapping[str, Any] | None = None) -> Path:
    """Write DAGSTER_HOME/dagster.yaml; ``postgres_db`` (see `embedded.postgres.storage_config`) adds the
    PostgreSQL storage, else Dagster uses its SQLite default."""
    dagster_home.mkdir(parents=True, exist_ok=True)
    path = dagster_home / "dagster.yaml"
    text = DAGSTER_YAML
    if postgres_db is not None:
        text += "# Run, event-log and schedule storage: the embedded PostgreSQL (stack up --dagster-postgres).\n"
        text += postgres_storage_yaml(postgres_db)
    path.write_text(text)
    return path


def create_pool_limits(dagster_home: Path, pools: Iterable[str]) -> list[str]:
    """Give each of `pools` that has none its default limit in the instance of `dagster_home`, one after another; the
    pools created.

    Dagster creates a pool's limit when a step first claims it. On PostgreSQL, two runs whose steps first claim one
    pool at the same moment (the `rides` and `taxi_zones` sensor runs both hold `rides_enriched`) both insert it, and
    the loser's run fails (dagster-io/dagster#33552). Created up front, no run creates one."""
    import dagster as dg

    instance = dg.DagsterInstance.from_config(str(dagster_home))
    try:
        storage = instance.event_log_storage
        existing = storage.get_concurrency_keys()
        created = [pool for pool in pools if pool not in existing]
        for pool in created:
            storage.initialize_concurrency_limit_to_default(pool)
        return created
    finally:
        instance.dispose()
