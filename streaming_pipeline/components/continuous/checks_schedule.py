"""The asset checks of the streaming tables on a schedule, for the continuous mode (docs/live-mode.md).

The live jobs of the triggered mode leave the checks out (the duplicate-key checks read every row's key), and a
continuous run materializes nothing itself: its queries write all the time. So this schedule runs every check in a
run of its own, beside them, every `CONTINUOUS_CHECKS_CRON` (running by default with LIVE_MODE=continuous; it can be
started in triggered mode too). Each check reads versions of its tables that belong together (the settled offsets of a
bronze table, the version of its source table a streamed table was computed from), so a check never fails because
a micro-batch committed while it read. The run holds no checkpoint pool: it only reads, and never waits for the
continuous run.
"""

from collections.abc import Sequence

import dagster as dg

from streaming_pipeline.lakehouse.settings import LiveSettings

LIVE_CHECKS_JOB = "live_checks_job"
LIVE_CHECKS_SCHEDULE = "live_checks_schedule"


def live_checks_definitions(live: LiveSettings, evaluated_by_writes: Sequence[dg.AssetCheckKey] = ()) -> dg.Definitions:
    """The job that runs every asset check of the streaming tables, and its schedule.

    Args:
        live: The live mode and `CONTINUOUS_CHECKS_CRON`: the schedule runs by default with LIVE_MODE=continuous.
        evaluated_by_writes: The checks that the runs writing a table evaluate on the rows they write (its
            expectations), which a run of its own cannot: left out.

    Returns:
        `live_checks_job` and `live_checks_schedule`.
    """
    job = dg.define_asset_job(
        name=LIVE_CHECKS_JOB,
        selection=dg.AssetSelection.all_asset_checks() - dg.AssetSelection.checks(*evaluated_by_writes),
        description="Every asset check of the streaming tables, none of them materialized: they may stream meanwhile.",
    )
    schedule = dg.ScheduleDefinition(
        name=LIVE_CHECKS_SCHEDULE,
        job=job,
        cron_schedule=live.checks_cron,
        execution_timezone="UTC",
        default_status=dg.DefaultScheduleStatus.RUNNING if live.continuous else dg.DefaultScheduleStatus.STOPPED,
        description=f"Runs {LIVE_CHECKS_JOB} (CONTINUOUS_CHECKS_CRON, default hourly). Running by default "
        "with LIVE_MODE=continuous.",
    )
    return dg.Definitions(jobs=[job], schedules=[schedule])
