"""Kill fuzz: the whole pipeline, one process with Spark's JVM, is killed with SIGKILL at random moments, in both
live modes, and run again each time with more records waiting. Afterwards the raw tables hold every Kafka record
exactly once, and the silver and gold tables equal what the test computes from the records it produced. The
lakehouse is on the session's object store: every run's own engine writes it over S3A, with the store's variables
in its environment.

Each round produces new rides and pickups and starts a run of the mode that has been killed less often so far
(triggered first): a triggered run, `dagster asset materialize --select '*'`, or a continuous run, `dagster job
execute -j continuous_streams_job` with `LIVE_MODE=continuous`, which streams every query until it is killed. It
waits until the run's first step has started (for a continuous run, until its first query streams), sleeps a
random time and SIGKILLs the run's whole process group (the Dagster CLI and the JVM: a machine that dies, not a
polite stop). The moment is uniform over the first KILL_WINDOW_S seconds. A triggered run that ends before its
kill moment counts as finished, not as a kill. The moments come from a seeded generator: the seed is printed and can
be set with STREAMING_PIPELINE_KILL_FUZZ_SEED. After the last kill a triggered run goes to the end (both modes use
the same checkpoints). The suite kills twice, once in each mode; STREAMING_PIPELINE_TEST_DEPTH=10 (depth.py) is the
long fuzz of 20 kills.
"""

from __future__ import annotations

import os
import random
import re
import signal
import subprocess
import time
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path

import pytest
from pyspark.sql import functions as F

from streaming_pipeline.devstack.embedded.processes import group_members
from streaming_pipeline.devstack.synthetic import SyntheticOptions, synthetic_pickups, synthetic_rides
from streaming_pipeline_tests.cli_helpers import (
    EXECUTE_THE_CONTINUOUS_JOB,
    MATERIALIZE_EVERY_ASSET,
    environment_without_pipeline_settings,
    produce_with_cli,
    start_in_a_group_of_its_own,
    start_materializing_every_asset,
)
from streaming_pipeline_tests.depth import scaled
from streaming_pipeline_tests.kafka_helpers import REPO_ROOT, all_coordinates, end_offsets
from streaming_pipeline_tests.project_tables import default_high_amount_threshold

pytestmark = [pytest.mark.integration, pytest.mark.slow]

KILLS = scaled(2)
SEED = int(os.environ.get("STREAMING_PIPELINE_KILL_FUZZ_SEED", str(int(time.time()))))
RIDES_PER_ROUND, PICKUPS_PER_ROUND = 600, 150
PER_TRIGGER = 200  # several micro-batches per bronze run, so that kills land between and inside them
# Kill moments fall within the first 40 s after a run's first step, which a whole run of a round's records outlasts
# on 2 cores (with a window longer than the run, most runs ended before their kill and too few rounds were killed).
KILL_WINDOW_S = 40.0
MAX_ROUNDS = 3 * KILLS  # rounds whose run ends before its kill moment do not count as kills
WINDOW_SECONDS = 600  # RIDE_WINDOW_DURATION's default, 10 minutes
RUN_TIMEOUT_S = 600
#: What a continuous run's log says once a query streams (engine.continuous), and what names the query.
STREAMING = re.compile(r"(\w+): streaming \(trigger every")


def _running_step(log: Path) -> str:
    """The step the run was in when it was killed: the last one started and not finished, from the event log (for
    a continuous run, its step and how many of its queries streamed)."""
    text = log.read_text(errors="replace")
    if "continuous_streams_job" in text:
        return f"continuous_streams ({len(set(STREAMING.findall(text)))} queries streaming)"
    started = re.findall(r'STEP_START - Started execution of step "([^"]+)"', text)
    finished = set(re.findall(r'STEP_(?:SUCCESS|FAILURE) - .*?step "([^"]+)"', text))
    running = [step for step in started if step not in finished]
    return running[-1] if running else ("(before the first step)" if not started else "(between steps)")


def _kill_group(proc: subprocess.Popen) -> None:
    """SIGKILL the process group `proc` leads (the Dagster CLI and Spark's JVM) and wait until all of it is gone."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait(timeout=30)
    deadline = time.monotonic() + 20
    while (alive := group_members(proc.pid)) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not alive, f"processes {alive} of group {proc.pid} still alive 20 s after SIGKILL"


def _window_start(moment: datetime) -> int:
    seconds = int(moment.timestamp())
    return seconds - seconds % WINDOW_SECONDS


@pytest.mark.timeout(900 + KILLS * 300)  # each round: a run's start, up to KILL_WINDOW_S, the kill
def test_sigkill_at_random_moments_then_rerun_gives_every_record_exactly_once(
    stack, session_object_store, spark, tmp_path
):
    lakehouse_dir = f"{session_object_store.lakehouse_dir}/kill-fuzz-{tmp_path.name}"
    rng = random.Random(SEED)
    print(f"kill fuzz: seed {SEED}, {KILLS} kills")
    dagster_home = tmp_path / "dagster_home"
    dagster_home.mkdir()
    (dagster_home / "dagster.yaml").write_text("")
    env = environment_without_pipeline_settings()
    env.update(
        KAFKA_BOOTSTRAP_SERVERS=stack.bootstrap_servers,
        SCHEMA_REGISTRY_URL=stack.schema_registry_url,
        LAKEHOUSE_DIR=lakehouse_dir,
        MAX_OFFSETS_PER_TRIGGER=str(PER_TRIGGER),
        DAGSTER_HOME=str(dagster_home),
    )

    produce_with_cli(stack, "zones", "--csv")  # the zones rides_enriched joins, from their table topic
    rides, pickups, killed_in, finished_rounds = [], [], Counter(), 0
    kills_by_mode = {"triggered": 0, "continuous": 0}
    for round_number in range(MAX_ROUNDS):
        if sum(killed_in.values()) == KILLS:
            break
        mode = min(kills_by_mode, key=kills_by_mode.__getitem__)  # the mode killed less often; triggered first
        produce_with_cli(stack, "rides", "--synthetic", str(RIDES_PER_ROUND), "--seed", str(SEED + round_number))
        rides += synthetic_rides(RIDES_PER_ROUND, SyntheticOptions(seed=SEED + round_number))
        produce_with_cli(stack, "pickups", "--synthetic", str(PICKUPS_PER_ROUND), "--seed", str(SEED + round_number))
        pickups += synthetic_pickups(PICKUPS_PER_ROUND, SyntheticOptions(seed=SEED + round_number))
        log = tmp_path / f"round-{round_number}.log"
        delay = rng.uniform(0.0, KILL_WINDOW_S)
        started = "STEP_START" if mode == "triggered" else STREAMING
        with log.open("wb") as out:
            if mode == "triggered":
                proc = start_materializing_every_asset(env, out)
            else:
                proc = start_in_a_group_of_its_own(EXECUTE_THE_CONTINUOUS_JOB, {**env, "LIVE_MODE": "continuous"}, out)
            try:
                deadline = time.monotonic() + RUN_TIMEOUT_S
                while not re.search(started, log.read_text(errors="replace")) and proc.poll() is None:
                    assert time.monotonic() < deadline, (
                        f"round {round_number} ({mode}): nothing started:\n{log.read_text()[-4000:]}"
                    )
                    time.sleep(0.1)
                kill_at = time.monotonic() + delay
                while proc.poll() is None and time.monotonic() < kill_at:
                    assert time.monotonic() < deadline, (
                        f"round {round_number}: the run did not end:\n{log.read_text()[-4000:]}"
                    )
                    time.sleep(0.05)
                if proc.poll() is None:
                    step = _running_step(log)
                    _kill_group(proc)
                    killed_in[step] += 1
                    kills_by_mode[mode] += 1
                    print(
                        f"kill fuzz: round {round_number} ({mode}) killed {delay:.1f} s after its first "
                        f"{'step' if mode == 'triggered' else 'query'} started, in {step}"
                    )
                else:  # a triggered run that finished; a continuous run never ends on its own
                    assert mode == "triggered" and proc.returncode == 0, (
                        f"round {round_number} ({mode}, seed {SEED}) ended on its own ({proc.returncode}):\n"
                        f"{log.read_text()[-6000:]}"
                    )
                    finished_rounds += 1
            finally:
                if proc.poll() is None:
                    _kill_group(proc)
    print(f"kill fuzz: {sum(killed_in.values())} kills, by step: {dict(killed_in)}; {finished_rounds} runs finished")
    assert sum(killed_in.values()) == KILLS, f"only {sum(killed_in.values())} of {KILLS} rounds were killed"
    assert KILLS < 2 or min(kills_by_mode.values()) >= 1, f"kills by mode: {kills_by_mode}"

    # The last run, to the end.
    final_log = tmp_path / "final.log"
    with final_log.open("wb") as out:
        final = subprocess.run(
            MATERIALIZE_EVERY_ASSET,
            cwd=REPO_ROOT,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            timeout=RUN_TIMEOUT_S,
            check=False,
        )
    assert final.returncode == 0, f"the last run failed (seed {SEED}):\n{final_log.read_text()[-8000:]}"

    def table(name: str):
        return spark.read.format("delta").load(f"{lakehouse_dir}/{name}")

    # Bronze: every Kafka record exactly once, with the content that was produced.
    for name, topic, produced in (("raw_rides", "rides", rides), ("raw_pickup_locations", "pickup_locations", pickups)):
        coordinates = [tuple(r) for r in table(name).select("kafka_topic", "kafka_partition", "kafka_offset").collect()]
        assert len(coordinates) == len(set(coordinates)) == len(produced), name
        assert set(coordinates) == all_coordinates(topic, end_offsets(stack.bootstrap_servers, topic)), name
        got = Counter(
            (r[0], int(r[1]))
            for r in table(name).select(F.expr("unix_micros(pickup_datetime)"), "pu_location_id").collect()
        )
        want = Counter((int(p["pickup_datetime"].timestamp() * 1_000_000), int(p["pu_location_id"])) for p in produced)
        assert got == want, f"{name}: the rows differ from what was produced"
    assert table("dead_letter_records").count() == 0

    # Gold and silver, against what the test computes from the produced rides.
    assert {r.vendor_id: r.trip_count for r in table("vendor_counts").collect()} == Counter(
        r["vendor_id"] for r in rides
    )
    per_window = Counter((_window_start(r["pickup_datetime"]), r["vendor_id"]) for r in rides)
    windows = {
        (int(r.start), r.vendor_id): (r.trip_count, r.late_trip_count)
        for r in table("ride_window_aggregates")
        .select(F.unix_timestamp("window_start").alias("start"), "vendor_id", "trip_count", "late_trip_count")
        .collect()
    }
    assert {key: on_time + late for key, (on_time, late) in windows.items()} == dict(per_window)
    threshold = default_high_amount_threshold()  # the default the runs used
    high = sum(1 for r in rides if r["total_amount"] is not None and r["total_amount"] >= threshold)
    low = sum(1 for r in rides if r["total_amount"] is not None and r["total_amount"] < threshold)
    assert (table("high_amount_rides").count(), table("low_amount_rides").count()) == (high, low)
    enriched = [tuple(r) for r in table("rides_enriched").select("kafka_partition", "kafka_offset").collect()]
    assert len(enriched) == len(set(enriched)) == len(rides)
    pairs = [
        tuple(r)
        for r in table("ride_pickup_joins")
        .select("ride_kafka_partition", "ride_kafka_offset", "pickup_kafka_partition", "pickup_kafka_offset")
        .collect()
    ]
    assert len(pairs) == len(set(pairs)), "a (ride, pickup) pair was joined twice"
    print(f"kill fuzz: done at {datetime.now(UTC):%H:%M:%S}")
