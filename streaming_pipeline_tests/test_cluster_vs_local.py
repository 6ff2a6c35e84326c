"""What a Spark standalone cluster changes (2 workers, executors in their own JVMs, each in a working directory of
its own, the lake on the stack's object store, so that no disk is shared), on the smallest part of the pipeline
that shows it: the bronze handlers' Python workers on executors (raw_rides, raw_pickup_locations and their dead
letters), a stateful query's state restored from checkpoints on the store (vendor_counts) and a MERGE (the
taxi_zones table topic and its history). Those tables equal local mode's, row for row, on the same Kafka records.

Local mode's tables are the session's materialized lakehouse (materialized_lakehouse.py: the TLC sample, pickups
near its dropoffs, undecodable records, then later rides with late ones, in two runs on the in-process engine, on
the session stack's object store). The test produces the same records, the same bytes at the same coordinates, to
a stack of its own, whose Spark Connect server drives a master with 2 workers, and materializes the selection with
Dagster's CLI as a user does, in the same two rounds: the second run restores the streaming state (the counts)
from the checkpoints on the store. After each round every table of the selection is compared as a multiset of rows
with local mode's at the same point (its version after the first run, then its newest), both read by the test
session's Spark: local mode's over S3, the cluster's from the files its store keeps for its objects (its
filesystem backend: the session's Spark has the session store's keys), and raw_rides once more over S3 with
delta-rs. The stack has PostgreSQL, so its engine keeps the catalog there: a Spark session of its own (another
process and JVM) configured for that metastore queries gold.vendor_counts and bronze.raw_rides by name.

The same stack is where `stack up --spark-workers 2` is checked as a user sees it, before the runs: its status
(human and JSON), a second `stack up` and a query whose rows say which executor JVM computed them; and after them,
`stack down` leaving no process behind, executors included.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from streaming_pipeline.devstack.embedded.processes import pid_alive
from streaming_pipeline.devstack.embedded.stack import EmbeddedStack, StackInfo, running_stack
from streaming_pipeline.devstack.errors import StackError
from streaming_pipeline_tests import materialized_lakehouse as local_mode
from streaming_pipeline_tests.cli_helpers import (
    MATERIALIZE_EVERY_ASSET,
    environment_without,
    environment_without_pipeline_settings,
    run_stack_cli,
    start_in_a_group_of_its_own,
)
from streaming_pipeline_tests.devstack.embedded.helpers import processes_mentioning
from streaming_pipeline_tests.materialized_lakehouse import MaterializedLakehouse

pytestmark = [pytest.mark.integration, pytest.mark.slow]

# The tables the cluster writes (the selection it materializes: bronze with its dead letters, a stateful count,
# a table topic's MERGE and history) and compares with local mode's. The windows' state lives in the same state
# store as the counts', and their MERGE is a foreachBatch handler's as the zones' is.
TABLES = {
    "raw_rides",
    "raw_pickup_locations",
    "dead_letter_records",
    "vendor_counts",
    "taxi_zones",
    "taxi_zones_history",
}
# The only columns left out of the comparison: those that name a run or a wall-clock time.
#   kafka_timestamp                   every table with the Kafka columns: when the producer sent the record (the
#                                     same records, sent again to the cluster's broker, carry later times)
#   dead_letter_records.failed_at     when the micro-batch that set the record aside ran (wall clock)
CLOCK_COLUMNS = {"kafka_timestamp"}
RUN_OR_CLOCK_COLUMNS = {
    "dead_letter_records": {"failed_at"},
    "taxi_zones_history": {"valid_from", "valid_to"},  # the Kafka timestamps of the zones' records
}
RUN_TIMEOUT_S = 900  # one round's run on the cluster
WORKERS = 2


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[StackInfo, Path]]:
    """(the stack whose engine drives a 2-worker cluster, a scratch dir): the test's own (the point of the test),
    stopped after it, also when it fails to start or a test fails."""
    root = tmp_path_factory.mktemp("cluster-vs-local")
    with running_stack(
        root / "stack",
        timeout=900,  # a fresh jar cache resolves s3proxy and the S3 connector first
        spark=True,
        spark_workers=WORKERS,
        spark_worker_cores=1,
        spark_worker_memory="1g",
        object_store=True,
        dagster_postgres=True,  # and so the engine's catalog in PostgreSQL, which other sessions share
    ) as stack:
        assert stack.spark_remote and stack.spark_master_url and stack.spark_workers == WORKERS
        assert stack.lakehouse_dir == "s3a://lakehouse" and stack.object_store_env
        yield stack, root


# A Connect client in its own process (pytest's process stays a classic driver for the other tests). Each row
# says which JVM computed it (its command line, working directory and pid); the Avro round trip needs the
# spark-avro jar where the row is computed, and the Delta write needs Delta's jars on the executors.
CLUSTER_CLIENT = """
import json, sys
from pyspark.sql import functions as F
from pyspark.sql.avro.functions import from_avro, to_avro
from streaming_pipeline.lakehouse.engine.spark import connect_session

spark = connect_session(sys.argv[1])
schema = '{"type": "record", "name": "r", "fields": [{"name": "id", "type": "long"}]}'
rows = spark.range(0, 400, 1, 8).select(
    "id",
    F.expr("java_method('java.lang.System', 'getProperty', 'sun.java.command')").alias("command"),
    F.expr("java_method('java.lang.System', 'getProperty', 'user.dir')").alias("cwd"),
    F.expr("reflect('java.lang.ProcessHandle', 'current')").alias("pid"),
    from_avro(to_avro(F.struct("id")), schema).alias("decoded"),
).collect()
spark.range(0, 100, 1, 4).write.format("delta").save(sys.argv[2])
print(json.dumps({
    "jvms": sorted({(r.command.split(" --driver-url")[0] + " " + r.command.split("--executor-id ")[-1].split()[0]
                     if "--executor-id" in r.command else r.command, r.cwd, int(r.pid)) for r in rows}),
    "round_trip": sorted(r.decoded.id for r in rows) == sorted(r.id for r in rows) == list(range(400)),
    "delta_sum": spark.read.format("delta").load(sys.argv[2]).agg(F.sum("id")).first()[0],
}))
spark.stop()
"""


def _check_status_and_executors(stack: StackInfo, root: Path) -> set[int]:
    """The 2-worker stack as `stack status` shows it, a second `stack up`, and a query over SPARK_REMOTE that runs
    on both executors, each in its own JVM and working directory. Returns the executors' pids."""
    directory = str(stack.directory)
    assert stack.spark_master_url and stack.spark_master_url.startswith("spark://127.0.0.1:")
    state = json.loads((stack.directory / "stack.json").read_text())
    assert state["spark_cluster"]["workers"] == WORKERS
    assert (state["spark_cluster"]["worker_cores"], state["spark_cluster"]["worker_memory_mb"]) == (1, 1024)

    # status --json, from another process, as a user runs it
    done = run_stack_cli("status", "--json", "--dir", directory)
    assert done.returncode == 0, done.stderr
    status = json.loads(done.stdout)
    assert status["running"] is True
    assert status["spark_master_url"] == stack.spark_master_url
    assert status["spark_workers"] == WORKERS
    assert status["spark_cluster"]["cores"] == WORKERS
    assert [w["cores"] for w in status["spark_cluster"]["workers"]] == [1, 1]
    assert [w["memory_mb"] for w in status["spark_cluster"]["workers"]] == [1024, 1024]
    assert {name for name, c in status["components"].items() if c["running"]} == {
        "kafka",
        "registry",
        "spark",
        "spark-master",
        "spark-worker-1",
        "spark-worker-2",
        "object_store",
        "postgres",
    }
    worker_addresses = {w["address"] for w in status["spark_cluster"]["workers"]}
    assert {status["components"][f"spark-worker-{i}"]["address"] for i in (1, 2)} == worker_addresses
    # Every endpoint on the loopback address: the master's RPC and web UI, each worker's, the driver.
    assert status["spark_cluster"]["webui_url"].startswith("http://127.0.0.1:")
    assert all(a.startswith("127.0.0.1:") for a in worker_addresses)
    assert all(w["webui_url"].startswith("http://127.0.0.1:") for w in status["spark_cluster"]["workers"])

    # the human status: master URL, alive workers and their cores
    text = run_stack_cli("status", "--dir", directory)
    assert text.returncode == 0, text.stderr
    assert f"Spark master: {stack.spark_master_url} (web UI http://127.0.0.1:" in text.stdout
    assert "Spark workers: 2 of 2 alive, 2 core(s) in all" in text.stdout
    for address in worker_addresses:
        assert re.search(
            rf"^  {re.escape(address)}  1 core\(s\) \(\d in use\), 1024 MiB  http://127\.0\.0\.1:\d+$",
            text.stdout,
            re.MULTILINE,
        ), text.stdout

    # `stack up` again: nothing new; asking for another size while it runs is refused with the way out
    again = EmbeddedStack(stack.directory, prefer_standard_ports=False).up()
    assert again.already_running and again.spark_pid == stack.spark_pid and again.spark_workers == WORKERS
    with pytest.raises(StackError, match=r"drives a standalone cluster of 2 worker\(s\).*stack down --dir"):
        EmbeddedStack(stack.directory, spark_workers=3).up()

    # A query over SPARK_REMOTE runs on the two executors, in their own JVMs and working directories.
    assert stack.spark_remote
    client = subprocess.run(
        [sys.executable, "-c", CLUSTER_CLIENT, stack.spark_remote, str(root / "executors-delta")],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
        env=environment_without(("SPARK_",)),
    )
    assert client.returncode == 0, client.stdout + client.stderr[-4000:]
    result = json.loads(client.stdout.strip().splitlines()[-1])
    assert result["round_trip"] is True
    assert result["delta_sum"] == sum(range(100))
    jvms = result["jvms"]
    assert {command for command, _cwd, _pid in jvms} == {
        "org.apache.spark.executor.CoarseGrainedExecutorBackend 0",
        "org.apache.spark.executor.CoarseGrainedExecutorBackend 1",
    }, jvms
    executor_pids = {pid for _command, _cwd, pid in jvms}
    assert len(executor_pids) == 2 and stack.spark_pid not in executor_pids
    cluster_dir = stack.directory / "spark-cluster"
    assert sorted(Path(cwd).relative_to(cluster_dir).parts[0] for _command, cwd, _pid in jvms) == [
        "worker-1",
        "worker-2",
    ]
    assert all(Path(cwd).parent.name.startswith("app-") for _command, cwd, _pid in jvms)
    return executor_pids


def _check_down_leaves_no_process(stack: StackInfo, executor_pids: set[int]) -> None:
    """`stack down` stops the Connect server, then the workers with their executors, then the master; nothing of
    the stack is left."""
    directory = str(stack.directory)
    status = json.loads(run_stack_cli("status", "--json", "--dir", directory).stdout)
    master_pid = status["components"]["spark-master"]["pid"]
    worker_pids = [status["components"][f"spark-worker-{i}"]["pid"] for i in (1, 2)]
    done = run_stack_cli("down", "--dir", directory)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    order = [
        next(i for i, line in enumerate(lines) if line.startswith(prefix))
        for prefix in (
            "Stopping Spark Connect server",
            "Stopping Spark worker 1",
            "Stopping Spark worker 2",
            "Stopping the Spark master",
        )
    ]
    assert order == sorted(order), done.stdout
    for pid in [master_pid, *worker_pids, *executor_pids, stack.spark_pid]:
        assert not pid_alive(pid), pid
    assert processes_mentioning(directory) == []
    assert stack.spark_master_url
    assert processes_mentioning(stack.spark_master_url.removeprefix("spark://")) == []
    after = json.loads(run_stack_cli("status", "--json", "--dir", directory).stdout)
    assert (after["spark_master_url"], after["spark_workers"], after["running"]) == (None, 0, False)


# Spark gives a new Python worker (the foreachBatch handlers run in one) a fixed 10 s to connect back. On 2 cores
# shared by a 2-worker cluster, its Connect server and the test session's engine that can pass; the run then fails
# with this message, and a rerun resumes from the checkpoints, exactly once, as the offset sensor's retry does live.
# Any other failure fails the test.
WORKER_START_TIMED_OUT = "Python worker failed to connect back"


def _materialize_on_the_cluster(stack: StackInfo, lakehouse: str, root: Path) -> None:
    """`dagster asset materialize -m streaming_pipeline.definitions --select <TABLES>` over the cluster's engine into
    `lakehouse` on the store, with the settings local mode's runs had (the defaults) and the store's variables, as
    `stack env` exports them. The run's whole process group is killed if it outlives the timeout or the test."""
    dagster_home = root / "dagster"
    dagster_home.mkdir(parents=True, exist_ok=True)
    (dagster_home / "dagster.yaml").touch()
    assert stack.spark_remote
    env = {
        **environment_without_pipeline_settings(),
        "SPARK_REMOTE": stack.spark_remote,
        "KAFKA_BOOTSTRAP_SERVERS": stack.bootstrap_servers,
        "SCHEMA_REGISTRY_URL": stack.schema_registry_url,
        **stack.object_store_env,
        "LAKEHOUSE_DIR": lakehouse,
        "DAGSTER_HOME": str(dagster_home),
    }
    log = root / "runs.log"
    deadline = time.monotonic() + RUN_TIMEOUT_S
    for attempt in (1, 2):
        with log.open("ab") as out:
            start_of_run = out.tell()
            proc = start_in_a_group_of_its_own([*MATERIALIZE_EVERY_ASSET[:-1], ",".join(sorted(TABLES))], env, out)
        try:
            code: int | None = proc.wait(timeout=max(1.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            code = None
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=30)
        output = log.read_bytes()[start_of_run:].decode(errors="replace")
        if code != 0 and WORKER_START_TIMED_OUT in output and attempt == 1:
            print(f"the run failed with {WORKER_START_TIMED_OUT!r}; running it again")
            continue
        assert code == 0, f"materialize on the cluster ({stack.spark_remote}) ended with {code}:\n{output[-8000:]}"
        return


# delta-rs over S3, in a process of its own whose environment holds only the store's variables (what `stack env`
# exports); s3a:// is the engine's scheme, delta-rs reads the same objects as s3://.
RAW_RIDES_OVER_S3 = """
import json, sys, deltalake
table = deltalake.DeltaTable(sys.argv[1].replace("s3a://", "s3://", 1))
query = "select count(*) as n, count(distinct concat(kafka_partition, '/', kafka_offset)) as d from t"
answer = deltalake.QueryBuilder().register("t", table).execute(query).read_all()
print(json.dumps([answer.column("n").to_pylist()[0], answer.column("d").to_pylist()[0]]))
"""


# A Spark session of its own (a classic driver in its own JVM, not the stack's engine), configured for the stack's
# shared metastore and its object store as docs/sql.md tells a user: it finds the tables the cluster's runs
# registered by name, and reads them over S3.
SESSION_OF_ITS_OWN = """
import json, sys
from pathlib import Path
from pyspark.sql import SparkSession
from streaming_pipeline.devstack.embedded.object_store import REGION
from streaming_pipeline.lakehouse.engine.catalog import shared_metastore_conf
from streaming_pipeline.lakehouse.engine.jars import metastore_jdbc_jars
from streaming_pipeline.lakehouse.engine.spark import engine_conf, s3a_conf, start_local_session

catalog_dir, endpoint, warehouse, *queries = sys.argv[1:]
conf = engine_conf("local", "local[1]", s3a_conf(endpoint, REGION))
conf.update(shared_metastore_conf(Path(catalog_dir), metastore_jdbc_jars(progress=None)))
conf["spark.sql.warehouse.dir"] = warehouse
spark = start_local_session(conf)
print(json.dumps([[list(row) for row in spark.sql(query).collect()] for query in queries]))
spark.stop()
"""


def _by_name_in_a_session_of_its_own(stack: StackInfo, root: Path, *queries: str) -> list[list[list[Any]]]:
    assert stack.object_store_url
    clean = environment_without(("AWS_", "SPARK_"))
    catalog_dir = stack.directory / "spark" / "catalog"
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            SESSION_OF_ITS_OWN,
            str(catalog_dir),
            stack.object_store_url,
            str(root / "wh"),
            *queries,
        ],
        env={**clean, **stack.object_store_env},
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return list(json.loads(done.stdout.strip().splitlines()[-1]))


def _rows_and_distinct_coordinates_over_s3(stack: StackInfo, uri: str) -> list[int]:
    clean = {key: value for key, value in os.environ.items() if not key.startswith("AWS_")}
    done = subprocess.run(
        [sys.executable, "-c", RAW_RIDES_OVER_S3, uri],
        env={**clean, **stack.object_store_env},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return list(json.loads(done.stdout.strip().splitlines()[-1]))


def _plain(value: Any) -> Any:
    """A hashable, comparable form of a Spark value (bytes, nested rows, arrays, maps)."""
    if isinstance(value, (bytes, bytearray)):
        return bytes(value)
    if isinstance(value, dict):
        return tuple(sorted((_plain(k), _plain(v)) for k, v in value.items()))
    if isinstance(value, (list, tuple)):  # Row is a tuple
        return tuple(_plain(v) for v in value)
    return value


def _content(
    spark: Any, path: Path | str, left_out: set[str], version: int | None
) -> tuple[list[tuple[str, str]], Counter]:
    reader = spark.read.format("delta")
    frame = (reader if version is None else reader.option("versionAsOf", version)).load(str(path))
    columns = sorted(c for c in frame.columns if c not in left_out)
    schema = [(f.name, f.dataType.simpleString()) for f in frame.schema.fields if f.name in columns]
    rows = Counter(_plain(tuple(row)) for row in frame.select(*columns).collect())
    return sorted(schema), rows


def _assert_identical(
    spark: Any, local: str, local_versions: dict[str, int | None], cluster: Path, when: str
) -> dict[str, int]:
    """Every table of TABLES in local mode (on the session's object store), at `local_versions`, equals the
    cluster's newest (read from the files of its store's objects), and the cluster wrote no other table."""
    assert set(local_versions) >= TABLES, f"{when}: local mode wrote only {sorted(local_versions)}"
    on_cluster = local_mode.table_versions(cluster)
    assert set(on_cluster) == TABLES, f"{when}: the cluster wrote {sorted(on_cluster)}, not {sorted(TABLES)}"
    sizes = {}
    for name in sorted(TABLES):
        left_out = CLOCK_COLUMNS | RUN_OR_CLOCK_COLUMNS.get(name, set())
        local_schema, local_rows = _content(spark, f"{local}/{name}", left_out, local_versions[name])
        cluster_schema, cluster_rows = _content(spark, cluster / name, left_out, None)
        assert cluster_schema == local_schema, f"{when}: {name}: columns differ"
        only_local, only_cluster = local_rows - cluster_rows, cluster_rows - local_rows
        assert not only_local and not only_cluster, (
            f"{when}: {name}: {sum(only_local.values())} row(s) only in local mode, e.g. {list(only_local)[:3]}; "
            f"{sum(only_cluster.values())} only on the cluster, e.g. {list(only_cluster)[:3]}"
        )
        sizes[name] = sum(local_rows.values())
    return sizes


@pytest.mark.timeout(1800)  # two runs on the cluster, on 2 cores shared with its 2 workers
def test_a_two_worker_cluster_shows_its_workers_gives_local_mode_s_tables_and_stops_with_no_process_left(
    cluster: tuple[StackInfo, Path], materialized_lakehouse: MaterializedLakehouse, rides_csv: Path, spark: Any
) -> None:
    stack, root = cluster
    local = materialized_lakehouse
    executor_pids = _check_status_and_executors(stack, root)
    lakehouse = f"{stack.lakehouse_dir}/cluster-lakehouse"
    stored = stack.directory / "object-store" / "buckets" / "lakehouse" / "cluster-lakehouse"  # its objects' files

    # Round 1: local mode's first records (the sample, pickups near its dropoffs, undecodable records).
    first = local_mode.produce_first_records(stack, rides_csv, root)
    assert [(b.partition, b.offset) for b in first.bad] == [(b.partition, b.offset) for b in local.bad]
    _materialize_on_the_cluster(stack, lakehouse, root)
    sizes = _assert_identical(spark, local.lakehouse, local.after_first_run, stored, "after the first runs")
    # The input reached every table (so the comparison compares something): every ride and pickup, the dead
    # letters, the counts, the zones.
    assert sizes["raw_rides"] == len(first.rides) and sizes["raw_pickup_locations"] == len(first.pickups)
    assert sizes["dead_letter_records"] == len(first.bad)
    assert min(sizes[t] for t in TABLES) > 0, sizes

    # Round 2: local mode's zone renamed, its later rides and pickups; the cluster restores its streaming state from
    # the checkpoints.
    assert local_mode.rename_a_zone(stack, first.rides, local_mode.later_rides()) == local.renamed_zone
    local_mode.produce_later_records(stack)
    _materialize_on_the_cluster(stack, lakehouse, root)
    # versions[1]: every table's newest version (the third run, with nothing new, changed none).
    sizes = _assert_identical(spark, local.lakehouse, local.versions[1], stored, "after the second runs")
    assert sizes["raw_rides"] == len(local.rides) and sizes["raw_pickup_locations"] == len(local.pickups)
    assert _rows_and_distinct_coordinates_over_s3(stack, f"{lakehouse}/raw_rides") == [len(local.rides)] * 2
    # The runs registered their tables in the metastore the engine keeps in the stack's PostgreSQL; another Spark
    # session configured for it finds them by name.
    vendors, rides = _by_name_in_a_session_of_its_own(
        stack,
        root,
        "SELECT vendor_id, trip_count FROM gold.vendor_counts ORDER BY vendor_id",
        "SELECT count(*), count(DISTINCT kafka_partition, kafka_offset) FROM bronze.raw_rides",
    )
    assert vendors == [[v, n] for v, n in sorted(Counter(int(v) for v in local.rides["vendor_id"]).items())]
    assert rides == [[len(local.rides), len(local.rides)]]
    # Nothing of the lake is on a disk the executors see: their working directories hold no table file.
    assert not list((stack.directory / "spark-cluster").rglob("*.parquet"))

    # The cluster's work ran on executors under both workers (standalone: the driver runs no tasks itself).
    for worker in range(1, WORKERS + 1):
        executors = list((root / "stack" / "spark-cluster" / f"worker-{worker}").glob("app-*/*/stderr"))
        assert executors, f"no executor ran under worker {worker}"

    _check_down_leaves_no_process(stack, executor_pids)
