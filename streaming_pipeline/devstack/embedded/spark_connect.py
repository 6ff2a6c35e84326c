"""The warm Spark engine: a Spark Connect server run from pyspark's own distribution plus the project's jars.

    server = SparkConnectServer(stack_dir / "spark", port=15002)
    server.start()                      # blocks until the gRPC port answers
    ... SparkSession.builder.remote(server.remote_url) ...
    server.stop()

The server is the Spark driver (``local[*]`` by default, or a standalone master). foreachBatch functions run
in a Python worker that the server starts, so PYSPARK_PYTHON is this interpreter, and the project is on its
PYTHONPATH.
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Self

from streaming_pipeline.devstack.embedded.ports import LOOPBACK, free_port, port_accepts
from streaming_pipeline.devstack.embedded.processes import ManagedProcess, python_env_with_project
from streaming_pipeline.lakehouse.engine.catalog import embedded_metastore_conf
from streaming_pipeline.lakehouse.engine.jars import pyspark_home, spark_jars
from streaming_pipeline.lakehouse.engine.java import find_java

SERVER_CLASS = "org.apache.spark.sql.connect.service.SparkConnectServer"
STANDARD_PORT = 15002
# The heap of the server's driver, sized for an hour of live runs. Spark Connect keeps every streaming query it
# started, stopped or not, for an hour after its last use (`SparkConnectStreamingQueryCache`, not configurable in
# Spark 4.2), with the session it ran in: about 3 to 4 MB each. Live runs start a query per step, up to about 9 a
# minute under steady load, so the last hour's queries take up to some 2 GB beside the engine's own 300 MB
# (docs/performance.md). With 1280m the heap filled after about 40 minutes of steady load.
DEFAULT_DRIVER_MEMORY = "3g"
# The heap when the stack starts in the continuous mode (`stack up --live-mode continuous`): its queries run for
# hours, so Spark Connect keeps only the few it restarts (the window query, for its reconcile every 5 minutes).
# With 1 GB the engine's RSS stayed under 2 GiB over half an hour of 1,000 rides/s (1,976 to 2,006 MiB in three
# runs; 2,569 MiB with 1.5 GB): by then the JVM holds nearly 1 GB outside the heap, mostly the classes Spark
# generates for query plans and the code the JIT compiled (docs/performance.md).
CONTINUOUS_DRIVER_MEMORY = "1g"


def driver_memory_for(live_mode: str | None) -> str:
    """The heap of an engine started for the stack's `LIVE_MODE`."""
    return CONTINUOUS_DRIVER_MEMORY if live_mode == "continuous" else DEFAULT_DRIVER_MEMORY


def spark_log4j2(header: str, info_logger: str) -> str:
    """A log4j2.properties for a Spark JVM: warnings on stderr, plus `info_logger`'s own lines (its start-up)."""
    return f"""# {header}
rootLogger.level = warn
rootLogger.appenderRef.stdout.ref = console
appender.console.type = Console
appender.console.name = console
appender.console.target = SYSTEM_ERR
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = %d{{yy/MM/dd HH:mm:ss}} %p %c{{1}}: %m%n%ex
logger.own.name = {info_logger}
logger.own.level = info
"""


_LOG4J2 = (
    spark_log4j2(
        "Written by streaming_pipeline.devstack.embedded.spark_connect: warnings, plus the server's own start-up "
        "lines.",
        "org.apache.spark.sql.connect.service",
    )
    # The metastore warns of every lookup of a name it does not have yet (`Failed to get database`), of its first
    # start on an empty database, and of Hive settings Spark sets that Hive 2.3 does not know.
    + "logger.metastore.name = org.apache.hadoop.hive.metastore.ObjectStore\nlogger.metastore.level = error\n"
    + "logger.hiveconf.name = org.apache.hadoop.hive.conf.HiveConf\nlogger.hiveconf.level = error\n"
)


def spark_environment(host: str) -> dict[str, str]:
    """The environment of a JVM from pyspark's distribution (the Connect server, a master, a worker): the project
    on PYTHONPATH, Java 17+, this interpreter for Python workers, SPARK_LOCAL_IP ``host``; not a Connect client."""
    env = python_env_with_project()
    java = find_java()
    env["JAVA_HOME"] = str(java.resolve().parents[1])
    env["SPARK_HOME"] = str(pyspark_home())
    env["PYSPARK_PYTHON"] = sys.executable
    env["SPARK_LOCAL_IP"] = host
    # glibc's default of 8 malloc arenas per core lets a busy JVM's native memory (Netty, gRPC, compilers) grow by
    # hundreds of MiB of fragmentation; two arenas is the usual cap for JVMs.
    env.setdefault("MALLOC_ARENA_MAX", "2")
    env.pop("SPARK_REMOTE", None)  # the process is (part of) the engine, not a client of one
    env.pop("SPARK_CONNECT_MODE_ENABLED", None)
    env.pop("SPARK_LOCAL_DIRS", None)  # it would win over the process's own spark.local.dir
    return env


class SparkConnectServer(ManagedProcess):
    """``spark-submit --class SparkConnectServer`` in the background, listening on ``host:port`` only."""

    title = "the Spark Connect server"

    def __init__(
        self,
        work_dir: Path,
        port: int | None = None,
        host: str = LOOPBACK,
        *,
        log_dir: Path | None = None,
        profile: str = "local",
        master: str | None = None,
        conf: dict[str, str] | None = None,
        driver_memory: str = DEFAULT_DRIVER_MEMORY,
        env: dict[str, str] | None = None,
        metastore_conf: dict[str, str] | None = None,
    ) -> None:
        super().__init__()
        self.work_dir = Path(work_dir).resolve()
        self.host = host
        self.port: int = port if port is not None else free_port(host)
        self.log_dir = Path(log_dir).resolve() if log_dir else self.work_dir
        self.profile = profile
        self.master = master
        self.conf = dict(conf or {})
        self.driver_memory = driver_memory
        # More variables of the server's environment: an object store's keys, which S3A reads from there.
        self.env = dict(env or {})
        # The catalog's metastore: a shared one (engine.catalog.shared_metastore_conf), else Derby in work_dir.
        self.metastore_conf = dict(metastore_conf or embedded_metastore_conf(self.work_dir))

    @property
    def remote_url(self) -> str:
        return f"sc://{self.host}:{self.port}"

    @property
    def log_file(self) -> Path:
        return self.log_dir / "spark-connect.log"

    def settings(self) -> dict[str, str]:
        from streaming_pipeline.lakehouse.engine.spark import engine_conf

        settings = {**self.metastore_conf, **engine_conf(self.profile, self.master, self.conf)}
        settings.update(
            {
                "spark.connect.grpc.binding.address": self.host,
                "spark.connect.grpc.binding.port": str(self.port),
                "spark.driver.memory": self.driver_memory,
                "spark.local.dir": str(self.work_dir / "tmp"),
                "spark.sql.warehouse.dir": str(self.work_dir / "warehouse"),
                # A client disconnecting must not leave its streaming queries or sessions behind for long.
                "spark.connect.session.manager.defaultSessionTimeout": "30m",
            }
        )
        return settings

    def command(self) -> list[str]:
        from streaming_pipeline.lakehouse.engine.class_data import with_java_options

        settings = with_java_options(self.settings())  # the class-data archive (engine/class_data.py)
        jars = settings.pop("spark.jars")
        # spark-submit's --driver-java-options wins over the setting: the setting's options go there too.
        driver_options = [
            settings.pop("spark.driver.extraJavaOptions", ""),
            f"-Dlog4j2.configurationFile={self.work_dir / 'log4j2.properties'}",
        ]
        command = [
            str(pyspark_home() / "bin" / "spark-submit"),
            "--class",
            SERVER_CLASS,
            "--name",
            "streaming-pipeline Spark Connect",
            "--jars",
            jars,
            "--driver-java-options",
            " ".join(filter(None, driver_options)),
        ]
        for key, value in settings.items():
            command += ["--conf", f"{key}={value}"]
        return command

    def environment(self) -> dict[str, str]:
        env = spark_environment(self.host)
        env["PYSPARK_DRIVER_PYTHON"] = sys.executable
        env.update(self.env)
        return env

    def start(self, timeout: float = 120.0) -> Self:
        """Start the server and wait until its gRPC port accepts connections (StackError naming the log if not)."""
        if self.running:
            return self
        self._check_port_free(self.port)
        spark_jars()  # resolve (once) before the clock starts
        self.work_dir.mkdir(parents=True, exist_ok=True)
        (self.work_dir / "tmp").mkdir(exist_ok=True)
        (self.work_dir / "log4j2.properties").write_text(_LOG4J2)
        self._start_process(
            self.command(),
            env=self.environment(),
            cwd=self.work_dir,
            label=f"Spark Connect server on {self.remote_url}",
            timeout=timeout,
        )
        return self

    def _readiness_probe(self) -> Callable[[], bool]:
        return functools.partial(port_accepts, self.port, self.host)

    def _not_ready_in_time(self, timeout: float) -> str:
        return f"did not listen on {self.host}:{self.port} within {timeout:.0f}s"

    def _described(self) -> tuple[object, ...]:
        return (self.remote_url, self.work_dir)
