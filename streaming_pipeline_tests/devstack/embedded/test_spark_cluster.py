"""The embedded Spark standalone cluster: the errors of a worker or a master that cannot start, the sizes of its
workers, and the options `stack up` refuses. A running 2-worker stack (its status, queries on its executors, and
`stack down` leaving no process behind) is tested in test_cluster_vs_local.py, on the stack that test starts anyway."""

from __future__ import annotations

import re
import socket
import sys
from pathlib import Path

import pytest

from streaming_pipeline.devstack.embedded.spark_cluster import SparkStandaloneCluster, parse_memory_mb, worker_share
from streaming_pipeline.devstack.errors import StackError
from streaming_pipeline.lakehouse.errors import ConfigurationError
from streaming_pipeline_tests.cli_helpers import run_stack_cli
from streaming_pipeline_tests.devstack.embedded.helpers import processes_mentioning


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
    negative = run_stack_cli("up", "--dir", str(tmp_path / "s"), "--spark-workers", "-1")
    assert negative.returncode == 2 and "expected 0 or more, got -1" in negative.stderr
    no_spark = run_stack_cli("up", "--dir", str(tmp_path / "s"), "--no-spark", "--spark-workers", "2")
    assert no_spark.returncode == 1
    assert "error: --spark-workers needs the Spark Connect server" in no_spark.stderr
    assert not (tmp_path / "s" / "stack.json").exists()
