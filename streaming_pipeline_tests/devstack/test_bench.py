"""Smoke tests: the benchmark commands run end to end on tiny inputs (no time is asserted).

Each runs as a user runs it, in a process of its own (a benchmark is a Spark Connect client, and pytest's own
process stays a classic driver for the other tests), on the session's stack, cleared for it (`--stack-dir`).
"""

import json
import statistics
import subprocess
import sys
from pathlib import Path

import pytest

from streaming_pipeline_tests.session_stack import SessionStack

pytestmark = [pytest.mark.integration, pytest.mark.slow]

REPO_ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture()
def stack_dir(session_stack: SessionStack) -> str:
    """The session's stack with its engine, with no topic and no subject: the bench counts every record as its own."""
    session_stack.clear(engine=True)
    return str(session_stack.directory)


def _bench(stack_dir: str, benchmark: str, *args: str) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "streaming_pipeline.devstack.cli", "bench", benchmark, "--stack-dir", stack_dir, *args],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    return done.stderr


def test_throughput_bench_measures_both_sizes_in_one_run_and_writes_every_figure(tmp_path, stack_dir: str) -> None:
    out = tmp_path / "bench.json"
    stderr = _bench(stack_dir, "throughput", "--rides", "300", "200", "--rounds", "2", "--json", str(out))
    figures = json.loads(out.read_text())
    assert figures["sizes"] == [200, 300] and figures["rounds"] == 2
    assert figures["engine"].startswith("Spark 4.2.0 Connect server") and "Delta 4.4.0" in figures["engine"]
    assert [size["rides"] for size in figures["figures"]] == [200, 300]
    for size in figures["figures"]:
        assert len(size["plain_spark_seconds"]) == len(size["ours_seconds"]) == 2
        for name in ("limit_consume_records_per_s", "plain_spark_rides_per_s", "ours_rides_per_s"):
            assert size[name] > 0, name
        assert size["ours_rides_per_s"] == pytest.approx(size["rides"] / statistics.median(size["ours_seconds"]))
        ratio = size["ours_rides_per_s"] / size["plain_spark_rides_per_s"]
        assert size["ratios"]["ours/plain_spark"] == round(ratio, 3)
        # Where the time goes: ours' handler steps, from the markers of each round's commits; no phases, as the
        # stack of --stack-dir was started without an event log (a private stack has one).
        assert [set(run) for run in size["ours_handler_ms"]] == [{"checkpoint", "committed_check", "registry"}] * 2
        assert size["phase_medians"] == {} and size["plain_spark_phases"] == []
    assert figures["peak_engine_rss_mib"] > 0
    # Its stages, without the Dagster run's DEBUG lines.
    assert "[bench] 300 rides, round 2: ours" in stderr
    assert " - DEBUG - " not in stderr and "STEP_START" not in stderr


def test_live_bench_measures_probes_under_load_through_dagster_dev_and_then_the_floor(tmp_path, stack_dir: str) -> None:
    """The continuous mode only: the triggered mode's path through `dagster dev` is test_live's, and the bench does
    the same for each mode but the LIVE_MODE it gives `dagster dev` (one mode fewer saves a stack and a minute).
    Then the latency floor on the same stack, with the same load and probes."""
    out = tmp_path / "live.json"
    _bench(
        stack_dir,
        "live",
        "--mode",
        "continuous",
        "--floor",
        "--rate",
        "50",
        "--seconds",
        "8",
        "--warmup",
        "4",
        "--probe-every",
        "2",
        "--idle-seconds",
        "3",
        # Longer than any of the downstream round's micro-batches at this load: a shorter quiet can come between
        # two of them, and the idle window then holds the next one's work without its commit.
        "--quiet-seconds",
        "15",
        "--json",
        str(out),
    )
    figures = json.loads(out.read_text())
    assert [m["mode"] for m in figures["modes"]] == ["continuous", "floor"]
    continuous, floor = figures["modes"]
    # 50 rides/s for the 4 s of warm-up and the 8 s with probes; the floor's load is the same rides, without the
    # pickups its bare pipeline does not read.
    assert (continuous["rides_produced"], continuous["pickups_produced"]) == (600, 60)
    assert (floor["rides_produced"], floor["pickups_produced"]) == (600, 0)
    for mode in (continuous, floor):
        assert mode["probes"] >= 1
        assert len(mode["raw_rides_seconds"]) == len(mode["vendor_counts_seconds"]) == mode["probes"]
        # No probe before the warm-up's end.
        assert (mode["warmup_seconds"], mode["load_seconds"]) == (4, 8)
        assert len(mode["probe_sent_seconds"]) == mode["probes"] and min(mode["probe_sent_seconds"]) >= 4
        # A probe is in raw_rides before vendor_counts can count it.
        assert all(
            0 < raw <= gold for raw, gold in zip(mode["raw_rides_seconds"], mode["vendor_counts_seconds"], strict=True)
        )
        # Each table holds only its own mode's rides (the floor reads the topic from where the pipeline left it),
        # each once.
        assert mode["exactly_once"] is True
        assert mode["engine_peak_rss_mib"] > 0
    # The continuous mode streams in one run; the sensor relaunches none while it works. The floor has no Dagster.
    assert (continuous["runs"], floor["runs"]) == (1, 0)
    assert floor["dagster_cpu_percent_under_load"] == 0
    # Where the work went: the engine's CPU per 1,000 rides in both; raw_rides' handler steps, from the markers of
    # its commits during the load, in the pipeline only (the floor's bare append has none). The stack of --stack-dir
    # was started without an event log, so there is no breakdown per query (a private stack has one).
    assert continuous["engine_cpu_seconds_per_1000_rides"] > 0 and floor["engine_cpu_seconds_per_1000_rides"] > 0
    assert continuous["handler_batches"] >= 1
    assert set(continuous["handler_ms"]) == {"checkpoint", "committed_check", "registry"}
    assert (floor["handler_batches"], floor["handler_ms"]) == (0, {})
    assert continuous["queries"] == floor["queries"] == {}


def test_soak_bench_samples_a_round_maintains_and_draws_its_chart(tmp_path, stack_dir: str) -> None:
    """One round, sampled and maintained: the smallest soak that runs every part of it (the ratios of the last
    samples to the first are test_soak_figures')."""
    out, chart = tmp_path / "soak.json", tmp_path / "soak.png"
    _bench(
        stack_dir,
        "soak",
        "--commits",
        "1",
        "--records-per-round",
        "1",
        "--sample-every",
        "1",
        "--maintain-every",
        "1",
        "--json",
        str(out),
        "--chart",
        str(chart),
    )
    figures = json.loads(out.read_text())
    # Round 1: one record per topic, committed before the sample (whose one-ride run adds a ride after counting).
    (sample,) = figures["samples"]
    assert sample["bronze_commits"] == {"raw_pickup_locations": 1, "raw_rides": 1}
    assert figures["rounds"] == 1 and [m["round"] for m in figures["maintenance"]] == [1]
    assert figures["maintenance"][0]["files_after"]["raw_rides"] >= 1
    assert sample["sensor_tick_seconds"] > 0 and sample["one_ride_run_seconds"] > 0
    assert sample["count_seconds"] > 0 and sample["dagster_home_bytes"] > 0 and sample["runs_kept"] > 0
    # raw_rides' log holds at least its commit files; the engine is a live process.
    assert sample["log_files"] >= sample["bronze_commits"]["raw_rides"] and sample["engine_rss_bytes"] > 0
    assert figures["ratios"] == {}  # one sample: nothing to compare
    assert chart.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and figures["chart"] == str(chart)


def test_a_stack_whose_topics_hold_records_is_refused_naming_them(session_stack: SessionStack, tmp_path) -> None:
    from streaming_pipeline.devstack.bench.common import bench_stack
    from streaming_pipeline.devstack.errors import BenchError
    from streaming_pipeline_tests.kafka_helpers import produce_raw

    info = session_stack.clear(engine=True)
    produce_raw(info.bootstrap_servers, "rides", [(b"1", b"a record"), (b"2", b"another")])
    with pytest.raises(BenchError) as refused:
        with bench_stack(tmp_path, session_stack.directory):
            pass
    assert f"the stack in {session_stack.directory} already holds records in {{'rides': 2}}" in str(refused.value)
    assert "leave out --stack-dir" in str(refused.value)
