"""The measurement of Dagster's storage (`devstack/dagster_storage.py`): the size of a DAGSTER_HOME, and a small
synthetic live day whose retention pass frees what the runs took."""

from __future__ import annotations

from pathlib import Path

import pytest

from streaming_pipeline.devstack.dagster_storage import (
    dagster_home_bytes,
    extrapolate,
    measure,
    report_markdown,
)


def test_dagster_home_bytes_counts_every_file_once(tmp_path: Path) -> None:
    assert dagster_home_bytes(tmp_path / "missing") == 0
    (tmp_path / "history" / "runs").mkdir(parents=True)
    (tmp_path / "history" / "runs.db").write_bytes(b"x" * 1000)
    (tmp_path / "history" / "runs" / "a.db-wal").write_bytes(b"x" * 24)
    (tmp_path / "link").symlink_to(tmp_path / "history" / "runs.db")
    assert dagster_home_bytes(tmp_path) == 1024
    assert dagster_home_bytes(str(tmp_path)) == 1024


@pytest.mark.slow
def test_a_small_synthetic_day_and_its_retention(tmp_path: Path) -> None:
    m = measure(3, home_root=tmp_path)

    assert m.runs == 3 and m.deleted == 2  # the newest run holds the latest materializations
    assert m.event_log_files_removed == 2
    assert m.bytes_per_run > 100_000  # a run's own SQLite event log alone is over 100 KB
    assert m.evaluations > 0 and m.bytes_per_evaluation > 0
    assert m.bytes_per_tick > 0 and m.bytes_per_observation > 0
    # The retention frees the runs' files and SQLite pages; the second batch reuses the pages.
    assert m.after_retention.files < m.after_runs.files
    assert m.after_retention.live_total < m.after_runs.live_total
    assert m.after_second_batch.disk_total < 2 * m.after_runs.disk_total
    month = extrapolate(m, 30)
    assert sum(month.with_retention.values()) < sum(month.without.values())
    assert "without retention" in report_markdown(m)
    assert not any(tmp_path.iterdir())  # the temporary DAGSTER_HOME is gone
