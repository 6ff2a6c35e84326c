"""`bench live` pieces that need no stack: `--repeat N` sums up its runs (the median and range of each figure,
per mode), and `--env KEY=VALUE` gives dagster dev a setting, checked before anything starts and recorded; the
checks' schedule stays out of the measurement; which runs a mode's `runs` counts; a load that cannot be produced
stops the bench with its own error; and the wait for a quiet lakehouse before the idle window, and an idle window
that a commit interrupts."""

import argparse
import os
import time
from pathlib import Path

import dagster as dg
import pytest

from streaming_pipeline.devstack.bench.live import (
    LiveModeFigures,
    LiveResult,
    _LoadThread,
    _measure_idle,
    _print_live,
    _print_spreads,
    _sensor_runs,
    _Timing,
    _wait_until_quiet,
    dagster_dev_env,
    live_repeats,
    live_settings,
)
from streaming_pipeline.devstack.cli import build_parser
from streaming_pipeline.devstack.errors import BenchError
from streaming_pipeline.lakehouse.settings import LiveSettings


def _run(*modes: tuple[str, float, float, bool]) -> LiveResult:
    result = LiveResult(machine="m", engine="e")
    for mode, raw_p50, rss, once in modes:
        figures = LiveModeFigures(mode=mode, rate=1000, load_seconds=120)
        figures.raw_rides_p50_seconds, figures.engine_peak_rss_mib, figures.exactly_once = raw_p50, rss, once
        result.modes.append(figures)
    return result


def test_repeats_give_each_modes_median_and_range_over_the_runs() -> None:
    runs = [
        _run(("triggered", 14.9, 2400.0, True), ("continuous", 6.2, 2000.0, True)),
        _run(("triggered", 17.5, 2500.0, True), ("continuous", 4.3, 2100.0, True)),
        _run(("triggered", 20.0, 2450.0, True), ("continuous", 5.3, 1900.0, False)),
    ]
    repeats = live_repeats(runs)
    assert repeats.runs == runs
    raw = repeats.spreads["continuous"]["raw_rides_p50_seconds"]
    assert (raw.median, raw.low, raw.high, raw.values) == (5.3, 4.3, 6.2, [6.2, 4.3, 5.3])
    rss = repeats.spreads["triggered"]["engine_peak_rss_mib"]
    assert (rss.median, rss.low, rss.high) == (2450.0, 2400.0, 2500.0)
    # Exactly once only if every run was.
    assert repeats.exactly_once == {"triggered": True, "continuous": False}


def test_an_even_number_of_runs_takes_the_mean_of_the_middle_two(capsys: pytest.CaptureFixture[str]) -> None:
    repeats = live_repeats([_run(("continuous", p50, 2000.0, True)) for p50 in (4.0, 7.0, 5.0, 6.0)])
    assert repeats.spreads["continuous"]["raw_rides_p50_seconds"].median == 5.5
    _print_spreads(repeats)
    out = capsys.readouterr().out
    assert "continuous: produce -> raw_rides p50 (s)" in out
    assert "median 5.5, 4.0 to 7.0 (4.0, 7.0, 5.0, 6.0)" in out
    assert "over 4 runs, each on a fresh stack" in out


def test_repeat_is_an_option_of_the_live_bench() -> None:
    args = build_parser().parse_args(["bench", "live", "--mode", "continuous", "--repeat", "3"])
    assert isinstance(args, argparse.Namespace) and args.repeat == 3
    assert build_parser().parse_args(["bench", "live"]).repeat == 1


def test_no_run_is_refused_before_any_stack_starts() -> None:
    from streaming_pipeline.devstack.bench.live import run_live_bench

    with pytest.raises(BenchError, match="--repeat must be 1 or more"):
        run_live_bench(("continuous",), None, repeat=0)


def test_env_settings_are_parsed_and_checked_as_the_definitions_read_them() -> None:
    assert live_settings(["CONTINUOUS_RECONCILE_SECONDS=60", "CONTINUOUS_TRIGGER_INTERVAL=1 second"]) == {
        "CONTINUOUS_RECONCILE_SECONDS": "60",
        "CONTINUOUS_TRIGGER_INTERVAL": "1 second",
    }
    assert live_settings([]) == {}
    with pytest.raises(BenchError, match="'CONTINUOUS_RECONCILE_SECONDS' is not KEY=VALUE"):
        live_settings(["CONTINUOUS_RECONCILE_SECONDS"])
    with pytest.raises(BenchError, match="--env: .*CONTINUOUS_RECONCILE_SECONDS"):
        live_settings(["CONTINUOUS_RECONCILE_SECONDS=-5"])
    with pytest.raises(BenchError, match="--env LIVE_MODE cannot be set"):
        live_settings(["LIVE_MODE=continuous"])


def test_env_settings_reach_dagster_dev_beside_the_stacks_addresses(tmp_path) -> None:
    stack_env = {"KAFKA_BOOTSTRAP_SERVERS": "127.0.0.1:1", "SPARK_REMOTE": "sc://127.0.0.1:2", "LIVE_MODE": "triggered"}
    settings = live_settings(["CONTINUOUS_RECONCILE_SECONDS=60"])
    assert dagster_dev_env(settings, stack_env, tmp_path / "lake", "continuous") == {
        "CONTINUOUS_CHECKS_CRON": "0 0 1 1 *",
        "CONTINUOUS_RECONCILE_SECONDS": "60",
        "KAFKA_BOOTSTRAP_SERVERS": "127.0.0.1:1",
        "SPARK_REMOTE": "sc://127.0.0.1:2",
        "LAKEHOUSE_DIR": str(tmp_path / "lake"),
        "LIVE_MODE": "continuous",
    }


def test_the_checks_schedule_stays_out_of_the_measurement_unless_env_sets_it(tmp_path) -> None:
    hourly = dagster_dev_env(live_settings(["CONTINUOUS_CHECKS_CRON=0 * * * *"]), {}, tmp_path, "continuous")
    assert hourly["CONTINUOUS_CHECKS_CRON"] == "0 * * * *"
    assert LiveSettings.from_env(dagster_dev_env({}, {}, tmp_path, "continuous")).checks_cron == "0 0 1 1 *"


@pytest.mark.parametrize("key", ["LAKEHOUSE_DIR", "SPARK_REMOTE", "DAGSTER_HOME", "KAFKA_SASL_PASSWORD"])
def test_env_cannot_set_what_the_bench_sets_or_credentials(key: str) -> None:
    with pytest.raises(BenchError, match=f"--env {key} cannot be set"):
        live_settings([f"{key}=x"])


def test_env_is_repeatable_refused_before_any_stack_starts_and_printed_with_the_figures(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from streaming_pipeline.devstack.bench.live import run_live_bench

    args = build_parser().parse_args(["bench", "live", "--env", "A=1", "--env", "B=2 s"])
    assert args.env == ["A=1", "B=2 s"]
    assert build_parser().parse_args(["bench", "live"]).env == []
    with pytest.raises(BenchError, match="not KEY=VALUE"):
        run_live_bench(("continuous",), None, env=["oops"])
    result = _run(("continuous", 5.0, 2000.0, True))
    result.settings = {"CONTINUOUS_RECONCILE_SECONDS": "60"}
    _print_live(result)
    lines = capsys.readouterr().out.splitlines()
    assert [line.split() for line in lines if line.startswith("settings")] == [
        ["settings", "(--env)", "CONTINUOUS_RECONCILE_SECONDS=60"]
    ]


def test_engine_conf_is_spark_settings_refused_before_any_stack_starts_and_printed_with_the_figures(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from streaming_pipeline.devstack.bench.live import run_live_bench

    args = build_parser().parse_args(["bench", "live", "--engine-conf", "spark.master=local[4]"])
    assert args.engine_conf == ["spark.master=local[4]"]
    with pytest.raises(BenchError, match="'master=local' is not spark.KEY=VALUE"):
        run_live_bench(("continuous",), None, engine_conf=["master=local"])
    with pytest.raises(BenchError, match="leave out --stack-dir"):
        run_live_bench(("continuous",), None, engine_conf=["spark.master=local[4]"], stack_dir=Path("stack"))
    result = _run(("continuous", 5.0, 2000.0, True))
    result.engine_settings = {"spark.master": "local[4]"}
    _print_live(result)
    lines = capsys.readouterr().out.splitlines()
    assert [line.split() for line in lines if line.startswith("engine settings")] == [
        ["engine", "settings", "(--engine-conf)", "spark.master=local[4]"]
    ]


def test_runs_count_what_the_pipelines_sensors_launched_not_automation_or_schedules() -> None:
    from dagster._core.storage.dagster_run import DagsterRun

    instance = dg.DagsterInstance.ephemeral()
    tags_of_runs = {
        "before": {"dagster/sensor_name": "raw_rides_offset_sensor"},
        "triggered": {"dagster/sensor_name": "raw_rides_offset_sensor"},
        "continuous": {"dagster/sensor_name": "continuous_streams_sensor"},
        "taxi_zones": {
            "dagster/sensor_name": "default_automation_condition_sensor",
            "dagster/from_automation_condition": "true",
        },
        "checks": {"dagster/schedule_name": "live_checks_schedule"},
    }
    for run_id, tags in tags_of_runs.items():
        instance.add_run(DagsterRun(job_name="__ASSET_JOB", run_id=run_id, tags=tags))
    assert _sensor_runs(instance, before={"before"}) == 2


def test_a_load_that_could_not_be_produced_stops_the_bench_with_its_own_error() -> None:
    sent: list[int] = []

    def failing_load() -> None:
        sent.append(1)
        raise BenchError("3 of 10 records could not be produced to rides")

    failed = _LoadThread("bench-load", failing_load)
    failed.start()
    with pytest.raises(BenchError, match=r"^the load stopped: 3 of 10 records could not be produced to rides$"):
        failed.result()
    assert sent == [1] and not failed.is_alive()

    finished = _LoadThread("bench-pickups", lambda: sent.append(2))
    finished.start()
    finished.result()
    assert sent == [1, 2] and finished.error is None


def test_the_wait_for_quiet_gives_the_quiet_itself_beyond_its_timeout_and_names_it_when_it_never_comes(
    tmp_path: Path,
) -> None:
    log = tmp_path / "raw_rides" / "_delta_log"
    log.mkdir(parents=True)  # a commit just now
    # Quiet for 1 s, with 0.2 s to spare: it comes after about 1 s, past the spare time alone.
    assert _wait_until_quiet(tmp_path, quiet_seconds=1.0, timeout=0.2) >= 0.5
    later = time.time() + 3600  # a commit that is always newer than the quiet asked for
    os.utime(log, (later, later))
    with pytest.raises(BenchError, match=r"never went 1 s without a commit in the 1 s after the catch-up$"):
        _wait_until_quiet(tmp_path, quiet_seconds=1.0, timeout=0.2)


def test_an_idle_window_that_a_commit_interrupts_is_measured_again_after_the_next_quiet(tmp_path: Path) -> None:
    raw, windows = (tmp_path / name / "_delta_log" for name in ("raw_rides", "ride_windows"))
    raw.mkdir(parents=True)
    windows.mkdir(parents=True)
    past = time.time() - 3600
    os.utime(raw, (past, past))
    os.utime(windows, (past, past))
    naps: list[float] = []

    def sleep(seconds: float) -> None:
        naps.append(seconds)
        if len(naps) == 1:  # a commit of the windows table inside the first window: the reconcile after the load
            os.utime(windows)
        time.sleep(seconds)

    timing = _Timing(probe_every=1.0, idle_seconds=2.0, quiet_seconds=1.0, timeout=30.0)
    idle = _measure_idle(tmp_path, lambda: [], timing, mode="continuous", sleep=sleep)
    assert idle.discarded == ["ride_windows committed"]
    # The first window was quiet at once and ended at its first nap; the second waited 1 s of quiet after the commit.
    assert idle.quiet_after_seconds >= 1.0 and idle.cpu_percent == 0.0
    # One nap of the first window, then the whole second one in naps of at most 1 s.
    assert naps[0] == 1.0 and sum(naps[1:]) == pytest.approx(2.0, abs=0.1)


def test_the_idle_measurement_gives_up_naming_the_tables_that_committed_in_every_window(tmp_path: Path) -> None:
    raw = tmp_path / "raw_rides" / "_delta_log"
    raw.mkdir(parents=True)
    past = time.time() - 3600
    os.utime(raw, (past, past))

    def sleep(seconds: float) -> None:
        os.utime(raw)  # a commit in every window
        time.sleep(0.01)

    timing = _Timing(probe_every=1.0, idle_seconds=5.0, quiet_seconds=0.5, timeout=1.0)
    with pytest.raises(
        BenchError,
        match=r"^no idle window of 5 s in the 2 s after the catch-up, each with work in it: raw_rides committed; then "
        r"raw_rides committed(; then raw_rides committed)*$",
    ):
        _measure_idle(tmp_path, lambda: [], timing, mode="continuous", sleep=sleep)


def test_an_idle_window_after_which_the_engine_was_busier_than_under_load_is_measured_again(tmp_path: Path) -> None:
    """No commit shows a micro-batch still running through the window; the engine's CPU does."""
    raw = tmp_path / "raw_rides" / "_delta_log"
    raw.mkdir(parents=True)
    past = time.time() - 3600
    os.utime(raw, (past, past))
    verdicts = ["the engine at 150% of a core, 90% under the load", None]
    timing = _Timing(probe_every=1.0, idle_seconds=0.2, quiet_seconds=0.1, timeout=30.0)
    idle = _measure_idle(tmp_path, lambda: [], timing, mode="floor", at_work=lambda: verdicts.pop(0))
    assert idle.discarded == ["the engine at 150% of a core, 90% under the load"] and verdicts == []
