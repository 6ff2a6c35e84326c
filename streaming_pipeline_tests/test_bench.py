"""Smoke test: the benchmark command runs end to end on a tiny input (no time is asserted)."""

import json

import pytest

from streaming_pipeline.cli import main


@pytest.mark.integration
def test_bench_command_runs_and_writes_every_figure(tmp_path) -> None:
    out = tmp_path / "bench.json"
    assert main(["bench", "--rides", "300", "--probes", "2", "--json", str(out)]) == 0
    figures = json.loads(out.read_text())
    assert figures["rides"] == 300
    assert figures["freshness_probes"] == 2
    for name in ("limit_consume_records_per_s", "plain_spark_rides_per_s", "ours_rides_per_s", "peak_driver_jvm_rss_mib",
                 "freshness_p50_seconds", "freshness_p95_seconds"):
        assert figures[name] > 0, name
    assert figures["ratios"]["ours/plain_spark"] == round(figures["ours_rides_per_s"] / figures["plain_spark_rides_per_s"], 3)
    assert figures["overhead_seconds_per_run"] == pytest.approx(figures["ours_seconds"] - figures["ours_streaming_seconds"], abs=1e-6)
