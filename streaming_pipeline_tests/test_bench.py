"""Smoke tests: both benchmark commands run end to end on tiny inputs (no time is asserted).

Each runs as a user runs it, in a process of its own: a benchmark is a Spark Connect client, and pytest's own
process stays a classic driver for the other tests.
"""

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.integration, pytest.mark.slow]

REPO_ROOT = Path(__file__).resolve().parents[1]


def _bench(*args: str) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "streaming_pipeline.cli", "bench", *args],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-4000:]


def test_throughput_bench_runs_and_writes_every_figure(tmp_path) -> None:
    out = tmp_path / "bench.json"
    _bench("--rides", "300", "--json", str(out))
    figures = json.loads(out.read_text())
    assert figures["rides"] == 300
    for name in ("limit_consume_records_per_s", "plain_spark_rides_per_s", "ours_rides_per_s", "peak_engine_rss_mib"):
        assert figures[name] > 0, name
    assert figures["ratios"]["ours/plain_spark"] == round(
        figures["ours_rides_per_s"] / figures["plain_spark_rides_per_s"], 3
    )
    assert figures["overhead_seconds_per_run"] == pytest.approx(
        figures["ours_seconds"] - figures["ours_streaming_seconds"], abs=1e-6
    )


def test_live_bench_measures_every_probe_through_dagster_dev(tmp_path) -> None:
    out = tmp_path / "live.json"
    _bench("--live", "--probes", "3", "--gap", "1", "--json", str(out))
    figures = json.loads(out.read_text())
    assert len(figures["raw_rides_seconds"]) == len(figures["vendor_counts_seconds"]) == 2
    assert all(
        raw <= gold for raw, gold in zip(figures["raw_rides_seconds"], figures["vendor_counts_seconds"], strict=True)
    )
    assert figures["first_ride_to_raw_rides_seconds"] > 0 and figures["sensor_runs"] >= 1
    # The sensor requests the run before the ride can be in raw_rides.
    assert 0 < figures["produce_to_run_requested_p50_seconds"] < figures["raw_rides_p50_seconds"]
    assert figures["peak_engine_rss_mib"] > 0
