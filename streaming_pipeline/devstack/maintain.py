"""`streaming-pipeline maintain [TABLE ...]`: OPTIMIZE and VACUUM lakehouse tables now, as the daily
table_maintenance_job does (docs/maintenance.md).

It runs that job's ops for the tables asked (all without any), in this process, on the Dagster instance of
DAGSTER_HOME when it is set, so the UI shows the run and its observations. It refuses to start while a run that
writes one of those tables is queued or running: OPTIMIZE must not run beside a stream that MERGEs or overwrites
the table. Once it runs, its run holds the pools of its tables, so live runs queue behind it.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from streaming_pipeline.devstack.project import project_sources, project_table_names
from streaming_pipeline.lakehouse.engine.maintenance import check_retention
from streaming_pipeline.lakehouse.errors import MaintenanceError
from streaming_pipeline.lakehouse.tables import DEAD_LETTER_RECORDS

if TYPE_CHECKING:  # Dagster is imported when a command runs, not when the command line is parsed
    import dagster as dg


class TableNames(argparse.Action):
    """TABLE ...: every name must be a lakehouse table, else argparse's usage error listing the valid names."""

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: str | Sequence[Any] | None,
        option_string: str | None = None,
    ) -> None:
        names = [values] if isinstance(values, str) else list(values or [])
        valid = project_table_names()
        for name in names:
            if name not in valid:
                parser.error(f"argument TABLE: invalid choice: {name!r} (choose from {', '.join(valid)})")
        setattr(namespace, self.dest, names)


@dataclass(frozen=True)
class InFlightRun:
    run_id: str
    job_name: str
    tables: frozenset[str]


def _tables_a_run_writes(run: dg.DagsterRun, defs: dg.Definitions, every: frozenset[str]) -> frozenset[str]:
    """The lakehouse tables `run` may write: its assets and the assets that must run with them (a multi-asset's
    siblings), with the dead letters when it ingests a bronze table. Another maintenance run, or a job this code
    location does not know, counts as writing every table."""
    from streaming_pipeline.components.maintenance import MAINTENANCE_JOB

    if run.job_name == MAINTENANCE_JOB:
        return every
    keys = run.asset_selection
    if keys is None:
        try:
            keys = defs.resolve_job_def(run.job_name).asset_layer.selected_asset_keys
        except Exception:  # a job of another code location on this instance: assume the worst
            return every
    graph = defs.resolve_asset_graph()
    names: set[str] = set()
    for key in keys:
        siblings = graph.get(key).execution_set_asset_keys if graph.has(key) else {key}
        names.update(sibling.to_user_string() for sibling in siblings)
    if names & {source.bronze_table for source in project_sources()}:
        names.add(DEAD_LETTER_RECORDS.name)
    return frozenset(names & every)


def runs_writing(instance: dg.DagsterInstance, defs: dg.Definitions, tables: Sequence[str]) -> list[InFlightRun]:
    """The queued or running runs that write one of `tables`."""
    import dagster as dg

    from streaming_pipeline.components.live_runs import IN_FLIGHT

    every = frozenset(project_table_names())
    found = []
    for run in instance.get_runs(filters=dg.RunsFilter(statuses=IN_FLIGHT), limit=500):
        written = _tables_a_run_writes(run, defs, every) & set(tables)
        if written:
            found.append(InFlightRun(run.run_id, run.job_name, written))
    return found


def maintain(
    tables: Sequence[str],
    *,
    defs: dg.Definitions,
    instance: dg.DagsterInstance,
    retain_hours: float | None = None,
    progress: Callable[[str], None] = print,
) -> str:
    """Run the maintenance ops of `tables` (every table when empty) once; print one line per table and return the
    run id. Nothing is done when the retention is below the minimum or a run that writes one of them is in flight."""
    from streaming_pipeline.components.maintenance import MAINTENANCE_JOB, op_name

    if retain_hours is not None:
        check_retention(retain_hours, what="--retain-hours")
    names = list(tables) or project_table_names()
    busy = runs_writing(instance, defs, names)
    if busy:
        listed = "; ".join(f"{run.run_id} ({run.job_name}: {', '.join(sorted(run.tables))})" for run in busy)
        raise MaintenanceError(
            f"run(s) in flight write the tables to maintain: {listed}. OPTIMIZE must not run beside a stream that "
            "rewrites its table: wait for them (or cancel them in the UI, or pause the offset sensors) and run "
            "`streaming-pipeline maintain` again. Nothing was done"
        )
    ops = [op_name(name) for name in names]
    run_config = (
        {"ops": {op: {"config": {"vacuum_retention_hours": retain_hours}} for op in ops}}
        if retain_hours is not None
        else None
    )
    job = defs.resolve_job_def(MAINTENANCE_JOB)
    result = job.execute_in_process(
        instance=instance,
        op_selection=ops,
        run_config=run_config,
        raise_on_error=False,
        tags={"streaming-pipeline/maintain": "cli"},
    )
    summaries = {
        event.asset_key.to_user_string(): event.asset_observation_data.asset_observation.metadata["summary"].value
        for event in result.all_events
        if event.is_asset_observation and event.asset_key is not None and event.asset_observation_data is not None
    }
    failures = {
        str(event.step_key): _first_line(event.event_specific_data.error.message)  # type: ignore[union-attr]
        for event in result.all_events
        if event.is_step_failure
    }
    for name in names:
        failure = failures.get(op_name(name))
        line = f"failed: {failure}" if failure else summaries.get(name, "not created yet, nothing to maintain")
        progress(f"{name}: {line}")
    if not result.success:
        raise MaintenanceError(
            f"the maintenance run {result.run_id} failed for {', '.join(sorted(failures)) or 'a step'}; "
            "see the lines above, or the run in the UI"
        )
    return result.run_id


def _first_line(message: object) -> str:
    lines = [line.strip() for line in str(message).splitlines() if line.strip()]
    return lines[0] if lines else "failed"
