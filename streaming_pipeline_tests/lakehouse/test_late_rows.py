"""What a run of a watermarked query reports of its watermark and the rows it dropped, from Spark's progress."""

from __future__ import annotations

from datetime import UTC, datetime

from streaming_pipeline.lakehouse.engine.streams import QueryRun, StreamRunReport
from streaming_pipeline.lakehouse.late_rows import LateRows, late_rows_of


def _progress(watermark: str, dropped: int) -> dict:
    return {"eventTime": {"watermark": watermark}, "stateOperators": [{"numRowsDroppedByWatermark": dropped}]}


def test_the_epoch_spark_reports_before_any_event_time_is_no_watermark() -> None:
    first_run = StreamRunReport("ride_pickup_joins", progresses=[_progress("1970-01-01T00:00:00.000Z", 0)])
    assert late_rows_of(QueryRun(first_run)) == LateRows(0, 0, None)


def test_a_run_reports_its_last_watermark_and_the_rows_dropped_in_all_its_batches() -> None:
    report = StreamRunReport(
        "ride_pickup_joins",
        progresses=[_progress("2024-03-10T01:00:00.000Z", 2), _progress("2024-03-10T01:05:00.000Z", 3)],
    )
    # no recorder: the rows dropped are the batches' own counts, 2 + 3
    assert late_rows_of(QueryRun(report)) == LateRows(5, 0, datetime(2024, 3, 10, 1, 5, tzinfo=UTC))
    # with its recorder, what the recorder counted (1 batch recorded, 4 rows) is what the run reports
    assert late_rows_of(QueryRun(report, progress=(1, 4))).rows_dropped_by_watermark == 4
