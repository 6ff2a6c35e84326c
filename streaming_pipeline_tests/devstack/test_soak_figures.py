"""The soak's figures from its samples, without a stack: each ratio is the median of the last tenth of the samples
over the median of the first tenth, held against its goal, and the active files after each maintenance pass
against theirs (the soak itself runs in test_bench's smoke)."""

from streaming_pipeline.devstack.bench.soak import MaintenancePass, SoakResult, SoakSample, _summarize


def _sample(round_number: int, tick: float, run: float, count: float) -> SoakSample:
    return SoakSample(
        round=round_number,
        elapsed_seconds=float(round_number),
        bronze_commits={"raw_rides": round_number},
        sensor_tick_seconds=tick,
        one_ride_run_seconds=run,
        count_seconds=count,
        dagster_home_bytes=1,
        runs_kept=1,
        active_files={},
        table_bytes={},
    )


def test_each_ratio_is_the_last_tenths_median_over_the_first_tenths_held_against_its_goal() -> None:
    # 20 samples: the first tenth is samples 1-2, the last tenth samples 19-20.
    samples = [_sample(i, tick=1.0, run=2.0, count=1.0) for i in range(1, 21)]
    samples[0].sensor_tick_seconds, samples[1].sensor_tick_seconds = 1.0, 3.0  # median 2.0
    samples[18].sensor_tick_seconds, samples[19].sensor_tick_seconds = 2.0, 2.8  # median 2.4
    samples[18].one_ride_run_seconds = samples[19].one_ride_run_seconds = 2.5  # 2.5 / 2.0
    samples[19].count_seconds = 2.0  # median of the last two 1.5: 1.5 / 1.0
    result = SoakResult(machine="m", samples=samples)
    result.maintenance = [
        # 10 files is the goal of a small table (2 per 100 MB, plus 10); 13 of 150 MB is the goal exactly.
        MaintenancePass(10, 10, {"a": 10, "b": 13}, {"a": 1_000, "b": 150_000_000}, 0, 1.0),
    ]
    _summarize(result)
    assert result.ratios == {"sensor_tick_seconds": 1.2, "one_ride_run_seconds": 1.25, "count_seconds": 1.5}
    assert result.goals_met == {
        "sensor_tick_seconds": True,  # goal 1.2
        "one_ride_run_seconds": False,  # goal 1.2
        "count_seconds": True,  # goal 1.5
        "active_files": True,
    }
    result.maintenance.append(MaintenancePass(20, 20, {"a": 11}, {"a": 1_000}, 0, 1.0))
    _summarize(result)
    assert result.goals_met["active_files"] is False


def test_one_sample_has_no_ratio() -> None:
    result = SoakResult(machine="m", samples=[_sample(1, 1.0, 1.0, 1.0)])
    _summarize(result)
    assert result.ratios == {} and result.goals_met == {}
