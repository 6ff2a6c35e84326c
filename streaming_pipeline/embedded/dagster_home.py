"""The Dagster instance directory of the embedded stack (DAGSTER_HOME, exported by `stack env`).

Its dagster.yaml makes the live path behave: every concurrency pool (one per streaming checkpoint, see
`assets.metadata.checkpoint_pool`) admits one run at a time, counted per run, so a sensor run, a manual run
and a UI run never work on the same checkpoint at once; queued runs are picked up every second; sensors are
evaluated on threads, so one slow tick does not hold the others back.
"""

from __future__ import annotations

from pathlib import Path

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
    granularity: run
    default_limit: 1
sensors:
  use_threads: true
  num_workers: 4
"""


def write_dagster_yaml(dagster_home: Path) -> Path:
    dagster_home.mkdir(parents=True, exist_ok=True)
    path = dagster_home / "dagster.yaml"
    path.write_text(DAGSTER_YAML)
    return path
