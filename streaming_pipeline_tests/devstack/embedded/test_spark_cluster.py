"""The embedded Spark standalone cluster: `stack up --spark-workers N`, its status, queries on its executors, and
`stack down` leaving no process behind (executors included)."""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from streaming_pipeline.devstack.embedded.processes import pid_alive
from streaming_pipeline.devstack.embedded.spark_cluster import SparkStandaloneCluster, parse_memory_mb, worker_share
from streaming_pipeline.devstack.embedded.stack import EmbeddedStack
from streaming_pipeline.errors import ConfigurationError, StackError
from streaming_pipeline_tests.devstack.embedded.helpers import FAKE_REGISTRY_MODULE, processes_mentioning

PROJECT_ROOT = Path(__file__).resolve().parents[3]

# A Connect client in its own process (pytest's process stays a classic driver for the other tests). Each row
# says which JVM computed it (its command line, working directory and pid); the Avro round trip needs the
# spark-avro jar where the row is computed, and the Delta write needs Delta's jars on the executors.
CLUSTER_CLIENT = """
import json, sys
from pyspark.sql import functions as F
from pyspark.sql.avro.functions import from_avro, to_avro
from streaming_pipeline.engine.spark import connect_session

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


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "streaming_pipeline.devstack.embedded.stack_cli", "stack", *args],
        cwd=PROJECT_ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


@pytest.fixture
def cluster_stack(tmp_path: Path) -> Iterator[EmbeddedStack]:
    """A stack with 2 workers (1 core, 1 GiB each) on free ports; always brought down, also on failure."""
    stack = EmbeddedStack(
        tmp_path / "stack",
        prefer_standard_ports=False,
        registry_module=FAKE_REGISTRY_MODULE,
        spark_workers=2,
        spark_worker_cores=1,
        spark_worker_memory="1g",
    )
    try:
        yield stack
    finally:
        stack.down(timeout=20)


@pytest.mark.integration
@pytest.mark.slow
def test_two_workers_status_queries_on_executors_and_down_leaves_no_process(
    cluster_stack: EmbeddedStack, tmp_path: Path
) -> None:
    stack = cluster_stack
    info = stack.up(timeout=300)
    assert info.spark_remote and info.spark_master_url and info.spark_master_url.startswith("spark://127.0.0.1:")
    assert info.spark_workers == 2
    state = json.loads(stack.state_file.read_text())
    assert state["spark_cluster"]["workers"] == 2
    assert (state["spark_cluster"]["worker_cores"], state["spark_cluster"]["worker_memory_mb"]) == (1, 1024)

    # status --json, from another process, as a user runs it
    done = _cli("status", "--json", "--dir", str(stack.directory))
    assert done.returncode == 0, done.stderr
    status = json.loads(done.stdout)
    assert status["running"] is True
    assert status["spark_master_url"] == info.spark_master_url
    assert status["spark_workers"] == 2
    assert status["spark_cluster"]["cores"] == 2
    assert [w["cores"] for w in status["spark_cluster"]["workers"]] == [1, 1]
    assert [w["memory_mb"] for w in status["spark_cluster"]["workers"]] == [1024, 1024]
    assert {name for name, c in status["components"].items() if c["running"]} == {
        "kafka",
        "registry",
        "spark",
        "spark-master",
        "spark-worker-1",
        "spark-worker-2",
    }
    master_pid = status["components"]["spark-master"]["pid"]
    worker_pids = [status["components"][f"spark-worker-{i}"]["pid"] for i in (1, 2)]
    worker_addresses = {w["address"] for w in status["spark_cluster"]["workers"]}
    assert {status["components"][f"spark-worker-{i}"]["address"] for i in (1, 2)} == worker_addresses
    # Every endpoint on the loopback address: the master's RPC and web UI, each worker's, the driver.
    assert status["spark_cluster"]["webui_url"].startswith("http://127.0.0.1:")
    assert all(a.startswith("127.0.0.1:") for a in worker_addresses)
    assert all(w["webui_url"].startswith("http://127.0.0.1:") for w in status["spark_cluster"]["workers"])

    # the human status: master URL, alive workers and their cores
    text = _cli("status", "--dir", str(stack.directory))
    assert text.returncode == 0, text.stderr
    assert f"Spark master: {info.spark_master_url} (web UI http://127.0.0.1:" in text.stdout
    assert "Spark workers: 2 of 2 alive, 2 core(s) in all" in text.stdout
    for address in worker_addresses:
        assert re.search(
            rf"^  {re.escape(address)}  1 core\(s\) \(\d in use\), 1024 MiB  http://127\.0\.0\.1:\d+$",
            text.stdout,
            re.MULTILINE,
        ), text.stdout

    # `stack up` again: nothing new; asking for another size while it runs is refused with the way out
    again = EmbeddedStack(stack.directory, prefer_standard_ports=False).up()
    assert again.already_running and again.spark_pid == info.spark_pid and again.spark_workers == 2
    with pytest.raises(StackError, match=r"drives a standalone cluster of 2 worker\(s\).*stack down --dir"):
        EmbeddedStack(stack.directory, spark_workers=3).up()

    # A query over SPARK_REMOTE runs on the two executors, in their own JVMs and working directories.
    client = subprocess.run(
        [sys.executable, "-c", CLUSTER_CLIENT, info.spark_remote, str(tmp_path / "delta")],
        cwd=PROJECT_ROOT,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
        env={k: v for k, v in os.environ.items() if not k.startswith("SPARK_")},
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
    assert len(executor_pids) == 2 and info.spark_pid not in executor_pids
    cluster_dir = stack.spark_cluster_dir
    assert sorted(Path(cwd).relative_to(cluster_dir).parts[0] for _command, cwd, _pid in jvms) == [
        "worker-1",
        "worker-2",
    ]
    assert all(Path(cwd).parent.name.startswith("app-") for _command, cwd, _pid in jvms)

    # down: the Connect server, the workers with their executors, the master; nothing of this stack is left
    done = _cli("down", "--dir", str(stack.directory))
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
    for pid in [master_pid, *worker_pids, *executor_pids, info.spark_pid]:
        assert not pid_alive(pid), pid
    assert processes_mentioning(str(stack.directory)) == []
    assert processes_mentioning(info.spark_master_url.removeprefix("spark://")) == []
    after = json.loads(_cli("status", "--json", "--dir", str(stack.directory)).stdout)
    assert (after["spark_master_url"], after["spark_workers"], after["running"]) == (None, 0, False)


class _BrokenWorkerCluster(SparkStandaloneCluster):
    """Workers started with an option Spark's Worker does not know: each prints its usage and exits."""

    def worker_command(self, index: int) -> list[str]:
        return [*super().worker_command(index)[:-1], "--no-such-option", self.master_url]


@pytest.mark.integration
@pytest.mark.slow
def test_a_worker_that_cannot_start_is_an_error_naming_its_log_and_nothing_is_left(tmp_path: Path) -> None:
    cluster = _BrokenWorkerCluster(
        tmp_path / "cluster", 1, log_dir=tmp_path / "logs", worker_cores=1, worker_memory="1g"
    )
    try:
        with pytest.raises(StackError) as failure:
            cluster.start(timeout=240)
        message = str(failure.value)
        assert "Spark worker 1 of 1" in message and "exited during start-up" in message
        assert str(tmp_path / "logs" / "spark-worker-1.log") in message
        assert "\nLast lines:\n" in message  # the worker's own words, from its log
        assert "Usage: Worker [options] <master>" in (tmp_path / "logs" / "spark-worker-1.log").read_text()
        assert cluster.master_pid is None and cluster.worker_pids == [None]
        assert processes_mentioning(str(tmp_path / "cluster")) == []
    finally:
        cluster.stop(timeout=10)


class _PortThiefCluster(SparkStandaloneCluster):
    """Another process takes the master's port after the cluster chose it and checked it was free."""

    thief: socket.socket | None = None

    def _write_files(self) -> None:
        super()._write_files()
        if self.thief is None:
            self.thief = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            self.thief.bind(("127.0.0.1", self.master_port))
            self.thief.listen(1)


@pytest.mark.integration
@pytest.mark.slow
def test_a_master_port_taken_after_it_was_chosen_is_chosen_again(tmp_path: Path) -> None:
    cluster = _PortThiefCluster(tmp_path / "cluster", 1, log_dir=tmp_path / "logs", worker_cores=1, worker_memory="1g")
    stolen = cluster.master_port
    messages: list[str] = []
    try:
        cluster.start(timeout=240, progress=messages.append)
        assert cluster.master_port != stolen
        assert any("lost a port to another process" in m for m in messages), messages
        status = cluster.status()
        assert (status.master_url, status.alive_workers) == (f"spark://127.0.0.1:{cluster.master_port}", 1)
        assert re.search(r"BindException|Address already in use", cluster.master_log_file.read_text())
    finally:
        cluster.stop(timeout=10)
        assert cluster.thief is not None
        cluster.thief.close()
    assert processes_mentioning(str(tmp_path / "cluster")) == []


@pytest.mark.integration
@pytest.mark.slow
def test_a_master_that_does_not_answer_in_time_is_an_error_naming_its_log(tmp_path: Path) -> None:
    cluster = SparkStandaloneCluster(
        tmp_path / "cluster", 1, log_dir=tmp_path / "logs", worker_cores=1, worker_memory="1g"
    )
    try:
        with pytest.raises(
            StackError,
            match=r"the Spark master \(spark://127\.0\.0\.1:\d+\) did not answer .* "
            r"within 0s\. See its log " + re.escape(str(cluster.master_log_file)),
        ):
            cluster.start(timeout=0.2)
        assert processes_mentioning(str(tmp_path / "cluster")) == []
    finally:
        cluster.stop(timeout=10)


def test_worker_share_and_sizes() -> None:
    assert worker_share(2, cpu_count=2, memory_mb=24 * 1024) == (1, 2048)
    assert worker_share(1, cpu_count=8, memory_mb=6 * 1024) == (8, 1536)
    assert worker_share(3, cpu_count=2, memory_mb=2 * 1024) == (1, 1024)
    assert worker_share(4, cpu_count=16, memory_mb=64 * 1024) == (4, 2048)
    assert (parse_memory_mb("1g"), parse_memory_mb("1536m"), parse_memory_mb("2G"), parse_memory_mb("512")) == (
        1024,
        1536,
        2048,
        512,
    )
    for bad in ("", "1.5g", "0m", "lots"):
        with pytest.raises(ConfigurationError, match="is not a size"):
            parse_memory_mb(bad)
    with pytest.raises(ConfigurationError, match="at least 1 worker"):
        worker_share(0)


def test_the_driver_of_a_cluster_asks_for_executors_that_fit_its_workers(tmp_path: Path) -> None:
    cluster = SparkStandaloneCluster(
        tmp_path, 2, worker_cores=1, worker_memory="1536m", master_port=17077, webui_port=18080
    )
    conf = cluster.driver_conf()
    assert conf["spark.master"] == "spark://127.0.0.1:17077"
    assert (conf["spark.executor.cores"], conf["spark.executor.memory"]) == ("1", "1536m")
    assert (conf["spark.driver.host"], conf["spark.driver.bindAddress"]) == ("127.0.0.1", "127.0.0.1")
    assert conf["spark.executorEnv.PYSPARK_PYTHON"] == sys.executable
    assert cluster.worker_command(2)[-1] == "spark://127.0.0.1:17077"
    assert SparkStandaloneCluster.from_record(tmp_path, cluster.record()).record() == cluster.record()


def test_cli_rejects_a_negative_worker_count_and_workers_without_spark(tmp_path: Path) -> None:
    negative = _cli("up", "--dir", str(tmp_path / "s"), "--spark-workers", "-1")
    assert negative.returncode == 2 and "expected 0 or more, got -1" in negative.stderr
    no_spark = _cli("up", "--dir", str(tmp_path / "s"), "--no-spark", "--spark-workers", "2")
    assert no_spark.returncode == 1
    assert "error: --spark-workers needs the Spark Connect server" in no_spark.stderr
    assert not (tmp_path / "s" / "stack.json").exists()
