"""One materialized lakehouse for the tests that only read tables: a fixed data set produced once, to the session's
secured stack (conftest.py: Kafka over SASL_SSL with client certificates, the registry over HTTPS with basic auth),
and every asset materialized (with its checks) in two runs, as Dagster's CLI would, its secrets read through
`dg.EnvVar` as the code location's are. The tables are on the session stack's object store
(`s3a://lakehouse/materialized`): every test that reads them reads S3. test_cluster_vs_local.py produces the same
records to a cluster's stack and compares.

- First run: the real NYC TLC sample (266 rides, `data/rides.csv` beside this file), a pickup at the dropoff zone of
  every fifth ride (on the join's inclusive 10-minute bound, just outside it, and between), four ride records no
  schema decodes (garbage, an unknown schema id, a wrong magic byte, a truncated frame) and one such pickup.
- Second run: 40 synthetic rides after the sample, a tenth of them an hour late, and a pickup near the dropoff of
  every fourth: the streaming state (windows, join, counts) carries over from the checkpoints of the first run.
- Third run: nothing new; the versions of every table before and after it are kept for a test to compare.

The expectations are the produced records themselves (`rides`, `pickups`, `bad`), for the tests to compute from.
Tests that need a history of their own (replays, resets, log cleanup, kills) build it themselves.
"""

from __future__ import annotations

import csv
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import dagster as dg
import pandas as pd

from streaming_pipeline.definitions import pipeline_definitions
from streaming_pipeline.devstack.cli import main as cli_main
from streaming_pipeline.devstack.embedded.stack import StackInfo
from streaming_pipeline.devstack.producer import produce, rows_from_records
from streaming_pipeline.devstack.records import read_csv, read_rides_csv, shipped_zone_lookup
from streaming_pipeline.devstack.synthetic import SyntheticOptions, synthetic_rides
from streaming_pipeline.lakehouse.engine.delta_log import filesystem, latest_version
from streaming_pipeline.lakehouse.tables import PICKUPS_TOPIC, RIDES_TOPIC, TAXI_ZONE_LOOKUP
from streaming_pipeline_tests.conftest import TLC_RIDE_COLUMNS, pipeline_resources_for
from streaming_pipeline_tests.kafka_helpers import avro_frame, clients_of, end_offsets, environ, produce_raw

SAMPLE_PICKUP_OFFSETS = [
    timedelta(minutes=-10),
    timedelta(minutes=10),
    timedelta(minutes=10, seconds=1),
    timedelta(minutes=-10, seconds=-1),
    timedelta(minutes=3),
    timedelta(0),
]
LATER_RIDES = 40


@dataclass(frozen=True)
class BadRecord:
    name: str
    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes
    error: str  # what the dead letter's error names


@dataclass
class MaterializedLakehouse:
    lakehouse: str  # s3a://<bucket>/materialized
    resources: dict[str, Any]
    dagster_home: Path
    rides: pd.DataFrame  # every ride produced, columns as in raw_rides, datetimes naive UTC
    pickups: pd.DataFrame  # pu_location_id, pickup_datetime
    bad: list[BadRecord]
    first_run_rides: int  # the rides of the first run: the first rows of `rides`
    renamed_zone: RenamedZone  # between the first run and the second
    end_offsets: dict[str, dict[int, int]]  # per topic, after everything was produced
    runs: list[dg.ExecuteInProcessResult]  # the two runs that took the records
    after_first_run: dict[str, int | None]  # every table's version after the first run
    versions: tuple[dict[str, int | None], dict[str, int | None]]  # every table's, before and after a third run

    def table_path(self, name: str) -> str:
        return f"{self.lakehouse}/{name}"


def sample_rides(rides_csv: Path) -> pd.DataFrame:
    frame = pd.read_csv(rides_csv).rename(columns=TLC_RIDE_COLUMNS)
    for column in ("pickup_datetime", "dropoff_datetime"):
        frame[column] = pd.to_datetime(frame[column])
    return frame


def _write_pickups_csv(rides: pd.DataFrame, path: Path) -> pd.DataFrame:
    rows = [
        (int(ride["do_location_id"]), ride["dropoff_datetime"] + SAMPLE_PICKUP_OFFSETS[i % len(SAMPLE_PICKUP_OFFSETS)])
        for i, (_, ride) in enumerate(rides.iloc[::5].iterrows())
    ]
    with path.open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["PULocationID", "tpep_pickup_datetime"])
        writer.writerows((zone, moment.strftime("%Y-%m-%d %H:%M:%S")) for zone, moment in rows)
    return pd.DataFrame({"pu_location_id": [z for z, _ in rows], "pickup_datetime": [m for _, m in rows]})


def _cli_produce(stack: StackInfo, kind: str, path: Path | None) -> None:
    """`streaming-pipeline produce` as a user runs it after `eval "$(streaming-pipeline stack env)"` (`--csv` with no
    file when `path` is None: the shipped zone lookup)."""
    csv_file = [] if path is None else [str(path)]
    args = ["produce", kind, "--csv", *csv_file, "--no-progress", "--bootstrap-servers", stack.bootstrap_servers]
    with environ(stack.secure_env):
        assert cli_main([*args, "--schema-registry-url", stack.schema_registry_url]) == 0


def _bad_records(stack: StackInfo, rides_csv: Path) -> list[BadRecord]:
    """Ride records no schema decodes, framed from a valid one, and a pickup too short for any frame."""
    kafka, registry = clients_of(stack)
    latest = registry.latest(f"{RIDES_TOPIC}-value")
    assert latest is not None
    schema_id, schema = latest
    assert registry.schema_by_id(9999) is None
    first_ride = next(row.record for row in read_rides_csv(rides_csv) if row.record is not None)
    valid = avro_frame(registry, schema, first_ride, RIDES_TOPIC)
    assert valid[:5] == b"\x00" + schema_id.to_bytes(4, "big") and len(valid) > 8
    rides = {
        "garbage": (b"garbage-key", b"not avro at all", "magic byte 110"),
        "unknown_id": (None, b"\x00" + (9999).to_bytes(4, "big") + valid[5:], "unknown schema id 9999"),
        "wrong_magic": (b"\x00\x00\x00\x00\x01\x02", b"\x01" + valid[1:], "magic byte 1"),
        "truncated": (b"k4", valid[:8], "truncated"),
    }
    # The keyless record goes to partition 0 (a keyless record's partition is otherwise random): the same records
    # are at the same coordinates on every fresh broker.
    placed = [
        produce_raw(kafka, RIDES_TOPIC, [(k, v)], partition=0 if k is None else None)[0] for k, v, _ in rides.values()
    ]
    bad = [
        BadRecord(name, RIDES_TOPIC, p, o, key, value, error)
        for (p, o), (name, (key, value, error)) in zip(placed, rides.items(), strict=True)
    ]
    ((p, o),) = produce_raw(kafka, PICKUPS_TOPIC, [(b"7", b"\x00\x00")])
    return [*bad, BadRecord("short_pickup", PICKUPS_TOPIC, p, o, b"7", b"\x00\x00", "message value is 2 bytes")]


def materialize_every_asset(resources: dict[str, Any], instance: dg.DagsterInstance) -> dg.ExecuteInProcessResult:
    definitions = pipeline_definitions()
    result = dg.materialize(
        [*definitions.assets, *definitions.asset_checks],  # type: ignore[list-item]
        resources=resources,
        instance=instance,
        raise_on_error=False,
    )
    assert result.success, [e.message for e in result.all_events if e.is_step_failure]
    return result


@dataclass(frozen=True)
class FirstRecords:
    rides: pd.DataFrame
    pickups: pd.DataFrame
    bad: list[BadRecord]


def produce_first_records(stack: StackInfo, rides_csv: Path, root: Path) -> FirstRecords:
    """The first run's records, produced to `stack` (no topic yet): the sample, pickups near its dropoffs, the
    undecodable records. On a fresh registry and broker they are the same bytes at the same coordinates every time
    (test_cluster_vs_local.py produces them again to compare a cluster's tables with these)."""
    rides = sample_rides(rides_csv)
    pickups = _write_pickups_csv(rides, root / "pickups.csv")
    _cli_produce(stack, "zones", None)
    _cli_produce(stack, "rides", rides_csv)
    _cli_produce(stack, "pickups", root / "pickups.csv")
    return FirstRecords(rides, pickups, _bad_records(stack, rides_csv))


def later_rides() -> list[dict[str, Any]]:
    """The second run's rides (synthetic, the same every time)."""
    options = SyntheticOptions(
        seed=7, start=datetime(2020, 7, 1, 2, 0, tzinfo=UTC), mean_gap_seconds=30, late_fraction=0.1
    )
    return list(synthetic_rides(LATER_RIDES, options))


@dataclass(frozen=True)
class RenamedZone:
    """The zone renamed on the `taxi_zones` topic between the first run and the second."""

    location_id: int
    old_name: str
    new_name: str


def rename_a_zone(stack: StackInfo, first: pd.DataFrame, later: list[dict[str, Any]]) -> RenamedZone:
    """Rename the pickup zone that the most rides of both runs have, with a record of its id on the `taxi_zones`
    table topic: the rides enriched before it keep the old name, those after get the new one."""
    both = set(first["pu_location_id"]) & {r["pu_location_id"] for r in later}
    location_id = int(first[first["pu_location_id"].isin(both)]["pu_location_id"].value_counts().index[0])
    (row,) = [r for r in read_csv(shipped_zone_lookup(), TAXI_ZONE_LOOKUP) if r.record["location_id"] == location_id]
    renamed = {**row.record, "zone": f"{row.record['zone']} (renamed)"}
    kafka, registry = clients_of(stack)
    result = produce(kafka, registry, TAXI_ZONE_LOOKUP.topic, rows_from_records([renamed]), show_progress=False)
    assert (result.sent, result.failed) == (1, 0)
    return RenamedZone(location_id, row.record["zone"], renamed["zone"])


def produce_later_records(stack: StackInfo) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The second run's records, produced to `stack`: (rides, pickups), as produced."""
    later = later_rides()
    later_pickups = [
        {"pu_location_id": r["do_location_id"], "pickup_datetime": r["dropoff_datetime"] + timedelta(minutes=2)}
        for r in later[::4]
    ]
    kafka, registry = clients_of(stack)
    for topic, records in ((RIDES_TOPIC, later), (PICKUPS_TOPIC, later_pickups)):
        result = produce(kafka, registry, topic, rows_from_records(records), show_progress=False)
        assert (result.sent, result.failed) == (len(records), 0)
    return later, later_pickups


def build(stack: StackInfo, rides_csv: Path, root: Path, spark_conf: dict[str, str]) -> MaterializedLakehouse:
    """Produce the data set to `stack` (cleared, its registry new) and materialize every asset twice into
    `materialized` on the stack's object store (this process has its variables), with `spark_conf`."""
    assert stack.lakehouse_dir is not None
    lakehouse, dagster_home = f"{stack.lakehouse_dir}/materialized", root / "dagster_home"
    dagster_home.mkdir(parents=True)
    # No "join the community" dialog over the UI's pages (test_ui.py), no telemetry.
    (dagster_home / "dagster.yaml").write_text("nux:\n  enabled: false\ntelemetry:\n  enabled: false\n")
    resources: dict[str, Any] = pipeline_resources_for(stack, lakehouse, spark_conf)
    instance = dg.DagsterInstance.from_config(str(dagster_home))

    first = produce_first_records(stack, rides_csv, root)
    with environ(stack.secure_env):  # where each run reads its secrets (dg.EnvVar), as in `dagster dev`
        runs = [materialize_every_asset(resources, instance)]
    after_first_run = table_versions(lakehouse)
    renamed_zone = rename_a_zone(stack, first.rides, later_rides())
    later, later_pickups = produce_later_records(stack)
    with environ(stack.secure_env):
        runs.append(materialize_every_asset(resources, instance))
        # A third run with nothing new, while the topics still hold what the tables were built from: it must change
        # no table.
        before = table_versions(lakehouse)
        materialize_every_asset(resources, instance)
    versions = (before, table_versions(lakehouse))

    return MaterializedLakehouse(
        lakehouse=lakehouse,
        resources=resources,
        dagster_home=dagster_home,
        rides=pd.concat([first.rides, _naive_utc(pd.DataFrame(later))], ignore_index=True),
        pickups=pd.concat([first.pickups, _naive_utc(pd.DataFrame(later_pickups))], ignore_index=True),
        bad=first.bad,
        first_run_rides=len(first.rides),
        renamed_zone=renamed_zone,
        end_offsets={topic: end_offsets(clients_of(stack)[0], topic) for topic in (RIDES_TOPIC, PICKUPS_TOPIC)},
        runs=runs,
        after_first_run=after_first_run,
        versions=versions,
    )


def table_versions(lakehouse: Path | str) -> dict[str, int | None]:
    """The newest Delta version of every table in `lakehouse` (a directory, or a URI the Delta log reader takes)."""
    fs, root = filesystem(str(lakehouse))
    names = sorted(entry.rstrip("/").rsplit("/", 1)[-1] for entry in fs.ls(root, detail=False))
    return {name: latest_version(f"{lakehouse}/{name}") for name in names if fs.isdir(f"{root}/{name}/_delta_log")}


def _naive_utc(frame: pd.DataFrame) -> pd.DataFrame:
    for column in ("pickup_datetime", "dropoff_datetime"):
        if column in frame:
            frame[column] = pd.to_datetime(frame[column]).dt.tz_localize(None)
    return frame
