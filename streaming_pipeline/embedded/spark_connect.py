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

import subprocess
import sys
import time
from pathlib import Path
from types import TracebackType

from streaming_pipeline.embedded.jars import pyspark_home, spark_jars
from streaming_pipeline.embedded.ports import LOOPBACK, free_port, is_port_free, port_accepts
from streaming_pipeline.embedded.processes import (
    find_java,
    output_since_last_start,
    pid_alive,
    python_env_with_project,
    start_background,
    stop_pid,
)
from streaming_pipeline.errors import StackError

SERVER_CLASS = "org.apache.spark.sql.connect.service.SparkConnectServer"
STANDARD_PORT = 15002
DEFAULT_DRIVER_MEMORY = "1536m"

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


_LOG4J2 = spark_log4j2(
    "Written by streaming_pipeline.embedded.spark_connect: warnings, plus the server's own start-up lines.",
    "org.apache.spark.sql.connect.service",
)


class SparkConnectServer:
    """``spark-submit --class SparkConnectServer`` in the background, listening on ``host:port`` only."""

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
    ) -> None:
        self.work_dir = Path(work_dir).resolve()
        self.host = host
        self.port: int = port if port is not None else free_port(host)
        self.log_dir = Path(log_dir).resolve() if log_dir else self.work_dir
        self.profile = profile
        self.master = master
        self.conf = dict(conf or {})
        self.driver_memory = driver_memory
        self._proc: subprocess.Popen[bytes] | None = None

    @property
    def remote_url(self) -> str:
        return f"sc://{self.host}:{self.port}"

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    @property
    def log_file(self) -> Path:
        return self.log_dir / "spark-connect.log"

    @property
    def running(self) -> bool:
        return self._proc is not None and pid_alive(self._proc.pid)

    def settings(self) -> dict[str, str]:
        from streaming_pipeline.resources.spark import engine_conf

        settings = engine_conf(self.profile, self.master, self.conf)
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
        settings = self.settings()
        jars = settings.pop("spark.jars")
        command = [
            str(pyspark_home() / "bin" / "spark-submit"),
            "--class",
            SERVER_CLASS,
            "--name",
            "streaming-pipeline Spark Connect",
            "--jars",
            jars,
            "--driver-java-options",
            f"-Dlog4j2.configurationFile={self.work_dir / 'log4j2.properties'}",
        ]
        for key, value in settings.items():
            command += ["--conf", f"{key}={value}"]
        return command

    def environment(self) -> dict[str, str]:
        env = python_env_with_project()
        java = find_java()
        env["JAVA_HOME"] = str(java.resolve().parents[1])
        env["SPARK_HOME"] = str(pyspark_home())
        env["PYSPARK_PYTHON"] = sys.executable
        env["PYSPARK_DRIVER_PYTHON"] = sys.executable
        env["SPARK_LOCAL_IP"] = self.host
        env.pop("SPARK_REMOTE", None)  # the server is the engine, not a client of one
        env.pop("SPARK_CONNECT_MODE_ENABLED", None)
        return env

    def start(self, timeout: float = 120.0) -> SparkConnectServer:
        """Start the server and wait until its gRPC port accepts connections (StackError naming the log if not)."""
        if self.running:
            return self
        if not is_port_free(self.port, self.host):
            raise StackError(
                f"cannot start the Spark Connect server: port {self.port} on {self.host} is already in use "
                "by another process; stop that process or choose another port"
            )
        spark_jars()  # resolve (once) before the clock starts
        self.work_dir.mkdir(parents=True, exist_ok=True)
        (self.work_dir / "tmp").mkdir(exist_ok=True)
        (self.work_dir / "log4j2.properties").write_text(_LOG4J2)
        self._proc = start_background(
            self.command(),
            self.log_file,
            env=self.environment(),
            cwd=self.work_dir,
            label=f"Spark Connect server on {self.remote_url}",
        )
        deadline = time.monotonic() + timeout
        try:
            while True:
                code = self._proc.poll()
                if code is not None:
                    raise self._failure(f"exited during start-up with code {code}")
                if port_accepts(self.port, self.host):
                    return self
                if time.monotonic() > deadline:
                    raise self._failure(f"did not listen on {self.host}:{self.port} within {timeout:.0f}s")
                time.sleep(0.2)
        except BaseException:
            stop_pid(self._proc.pid, timeout=10)
            raise

    def _failure(self, what: str) -> StackError:
        output = output_since_last_start(self.log_file, 15)
        return StackError(
            f"the Spark Connect server {what}. See its log {self.log_file}."
            + (f"\nLast lines:\n{output}" if output.strip() else "")
        )

    def stop(self, timeout: float = 30.0) -> None:
        """SIGTERM the server (its streaming queries stop with it), SIGKILL after ``timeout`` seconds."""
        if self._proc is None:
            return
        stop_pid(self._proc.pid, timeout=timeout)
        self._proc.poll()

    def __enter__(self) -> SparkConnectServer:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def __repr__(self) -> str:
        state = f"pid {self.pid}" if self.running else "stopped"
        return f"SparkConnectServer({self.remote_url}, {self.work_dir}, {state})"
