"""A Spark standalone cluster run from pyspark's own distribution: one master and N workers in the background.

    cluster = SparkStandaloneCluster(stack_dir / "spark-cluster", workers=2, log_dir=stack_dir / "logs")
    cluster.start()          # blocks until the N workers are ALIVE at the master (StackError naming a log if not)
    cluster.master_url       # spark://127.0.0.1:7077: the --master of the Spark Connect server (the driver)
    cluster.driver_conf()    # what that driver needs to run executors on these workers
    cluster.status()         # master URL, web UI, the alive workers and their cores (the master's /json)
    cluster.stop()           # the workers (and their executors), then the master

Each process is pyspark's ``bin/spark-class org.apache.spark.deploy.master.Master`` (or ``...worker.Worker``),
started detached with its output in ``<log_dir>/spark-master.log`` / ``spark-worker-<i>.log``. Every endpoint
binds to ``host`` (127.0.0.1): ``--host`` for the RPC endpoints, SPARK_LOCAL_IP for the web UIs. The master's web
UI is on a port of its own (``/json`` is how the status is read); the workers' web UIs take any free port.

Each worker gets ``worker_cores`` cores and ``worker_memory_mb`` MiB (default: its share of the machine, see
:func:`worker_share`), and the driver asks for one executor per worker that fits it exactly. Executors run in
JVMs of their own, started by their worker, with their working directory under the worker's ``--work-dir``
(never the driver's), their scratch space under the worker's ``local/`` and the same Python as this process.
The project's jars reach them through the driver (``--jars``), not through any shared classpath.

Layout of ``work_dir``: ``conf/`` (SPARK_CONF_DIR of every process: a log4j2.properties, no spark-env.sh),
``master.conf`` and ``worker-<i>.conf`` (each process's ``--properties-file``; their paths also tell our
processes apart from others when only a pid is known), ``worker-<i>/`` (work dir: one folder per application
and executor, with the executor's stdout/stderr) and ``worker-<i>/local/``.
"""

from __future__ import annotations

import json
import os
import re
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from streaming_pipeline.devstack.embedded.ports import LOOPBACK, free_port, is_port_free
from streaming_pipeline.devstack.embedded.processes import (
    ManagedProcess,
    output_since_last_start,
    pid_matches,
    stop_announced,
)
from streaming_pipeline.devstack.embedded.spark_connect import spark_environment, spark_log4j2
from streaming_pipeline.devstack.errors import StackError
from streaming_pipeline.lakehouse.engine.jars import pyspark_home
from streaming_pipeline.lakehouse.errors import ConfigurationError

MASTER_CLASS = "org.apache.spark.deploy.master.Master"
WORKER_CLASS = "org.apache.spark.deploy.worker.Worker"
STANDARD_MASTER_PORT = 7077
# Heap of the master and worker daemons themselves (executors get spark.executor.memory).
DAEMON_MEMORY = "384m"
MIN_WORKER_MEMORY_MB = 1024
MAX_WORKER_MEMORY_MB = 2048
REGISTERED = "Successfully registered with master"
_WORKER_STARTED = re.compile(r"Starting Spark worker (\S+:\d+) with")
_BIND_FAILED = re.compile(r"BindException|Address already in use|could not bind")
MASTER_START_ATTEMPTS = 3  # another process may take a free port between our check and the master's bind

_LOG4J2 = spark_log4j2(
    "Written by streaming_pipeline.devstack.embedded.spark_cluster: SPARK_CONF_DIR of the master, the workers and\n"
    "# their executors. Warnings, plus the deploy daemons' own lines (workers registering, executors launched and\n"
    "# exiting).",
    "org.apache.spark.deploy",
)

Progress = Callable[[str], None]


def _quiet(_message: str) -> None:
    pass


# --------------------------------------------------------------------------- sizes


def parse_memory_mb(text: str) -> int:
    """``1g``, ``1536m``, ``2G``, ``1024`` (MiB) -> MiB; ConfigurationError for anything else."""
    match = re.fullmatch(r"\s*(\d+)\s*([mMgG]?)[bB]?\s*", str(text))
    if not match or int(match.group(1)) <= 0:
        raise ConfigurationError(f"Spark worker memory {text!r} is not a size such as 1g or 1536m")
    number, unit = int(match.group(1)), match.group(2).lower()
    return number * 1024 if unit == "g" else number


def physical_memory_mb() -> int | None:
    try:
        return int(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // (1024 * 1024))
    except (ValueError, OSError, AttributeError):
        return None


def worker_share(workers: int, cpu_count: int | None = None, memory_mb: int | None = None) -> tuple[int, int]:
    """(cores, MiB) of one of ``workers`` workers on this machine: the cores split evenly (at least 1 each), and
    a quarter of the physical memory split evenly, kept between 1 and 2 GiB per worker (the driver, Kafka and
    the rest of the stack need the remainder)."""
    if workers < 1:
        raise ConfigurationError(f"a Spark cluster needs at least 1 worker, not {workers}")
    cpus = cpu_count if cpu_count is not None else (os.cpu_count() or 1)
    cores = max(1, cpus // workers)
    total = memory_mb if memory_mb is not None else physical_memory_mb()
    share = (total // 4 // workers) if total else MIN_WORKER_MEMORY_MB
    share = min(MAX_WORKER_MEMORY_MB, max(MIN_WORKER_MEMORY_MB, share // 256 * 256))
    return cores, share


# --------------------------------------------------------------------------- what the master reports


@dataclass(frozen=True)
class AliveWorker:
    """A worker the master lists as ALIVE."""

    worker_id: str
    address: str  # host:port of its RPC endpoint
    cores: int
    cores_used: int
    memory_mb: int
    webui_url: str

    def as_json(self) -> dict[str, Any]:
        return {
            "id": self.worker_id,
            "address": self.address,
            "cores": self.cores,
            "cores_used": self.cores_used,
            "memory_mb": self.memory_mb,
            "webui_url": self.webui_url,
        }


@dataclass(frozen=True)
class MasterView:
    """The master's ``/json`` page: its URL, its state, the ALIVE workers and the running applications."""

    url: str
    state: str
    workers: tuple[AliveWorker, ...]
    active_apps: tuple[str, ...]

    @property
    def cores(self) -> int:
        return sum(worker.cores for worker in self.workers)


def read_master(webui_url: str, timeout: float = 3.0) -> MasterView | None:
    """What the master at ``webui_url`` reports, None when it does not answer (yet)."""
    try:
        with urllib.request.urlopen(webui_url.rstrip("/") + "/json/", timeout=timeout) as response:
            data = json.loads(response.read().decode())
    except (OSError, ValueError, urllib.error.URLError):
        return None
    if not isinstance(data, dict):
        return None
    workers = tuple(
        AliveWorker(
            worker_id=str(w.get("id")),
            address=f"{w.get('host')}:{w.get('port')}",
            cores=int(w.get("cores", 0)),
            cores_used=int(w.get("coresused", 0)),
            memory_mb=int(w.get("memory", 0)),
            webui_url=str(w.get("webuiaddress", "")),
        )
        for w in data.get("workers", [])
        if isinstance(w, dict) and w.get("state") == "ALIVE"
    )
    apps = tuple(str(a.get("id")) for a in data.get("activeapps", []) if isinstance(a, dict))
    return MasterView(
        url=str(data.get("url", "")), state=str(data.get("status", "")), workers=workers, active_apps=apps
    )


# --------------------------------------------------------------------------- status


@dataclass(frozen=True)
class ClusterProcess:
    """One process of the cluster as this stack recorded it."""

    name: str  # spark-master, spark-worker-1, ...
    pid: int | None  # when running
    running: bool
    log_file: Path
    address: str | None = None  # the master's URL; a worker's RPC endpoint host:port (from its log) while it runs


@dataclass(frozen=True)
class SparkClusterStatus:
    workers_wanted: int
    worker_cores: int
    worker_memory_mb: int
    master_url: str | None  # spark://host:port while the master runs
    webui_url: str | None
    master: ClusterProcess
    workers: tuple[ClusterProcess, ...]
    alive: tuple[AliveWorker, ...]  # the workers the master lists as ALIVE

    @property
    def processes(self) -> tuple[ClusterProcess, ...]:
        return (self.master, *self.workers)

    @property
    def alive_workers(self) -> int:
        return len(self.alive)

    @property
    def cores(self) -> int:
        return sum(worker.cores for worker in self.alive)

    @property
    def running(self) -> bool:
        """The master and every worker process run, and all workers are ALIVE at the master."""
        return all(p.running for p in self.processes) and self.alive_workers == self.workers_wanted

    def as_json(self) -> dict[str, Any]:
        return {
            "master_url": self.master_url,
            "webui_url": self.webui_url,
            "workers_wanted": self.workers_wanted,
            "alive_workers": self.alive_workers,
            "cores": self.cores,
            "worker_cores": self.worker_cores,
            "worker_memory_mb": self.worker_memory_mb,
            "workers": [w.as_json() for w in self.alive],
            "processes": {
                p.name: {"running": p.running, "pid": p.pid, "address": p.address, "log_file": str(p.log_file)}
                for p in self.processes
            },
        }


# --------------------------------------------------------------------------- its processes


class SparkDaemon(ManagedProcess):
    """A worker (or the master) as the cluster object starts it: pyspark's ``bin/spark-class`` in the background,
    its output in its own log. While the cluster starts, whether it exited is read from the process itself, not
    from its command line (briefly unreadable while bash execs java). The cluster stops it by its pid."""

    poll_seconds = 0.25
    exited_during_start = "exited during start-up"

    def __init__(self, title: str, log_file: Path) -> None:
        super().__init__()
        self.title = title
        self._log_file = log_file

    @property
    def log_file(self) -> Path:
        return self._log_file

    def launch(self, command: list[str], env: Mapping[str, str], cwd: Path, label: str) -> int:
        """Start the process without waiting for it; its pid."""
        self._launch(command, env=env, cwd=cwd, label=label)
        assert self.pid is not None
        return self.pid


class SparkMaster(SparkDaemon):
    """The master: it answers once its web UI's ``/json`` says ALIVE, at the URL it was started for."""

    def __init__(self, master_url: str, webui_url: str, log_file: Path) -> None:
        super().__init__(f"the Spark master ({master_url})", log_file)
        self.master_url = master_url
        self.webui_url = webui_url

    def wait_alive(self, deadline: float, timeout: float) -> None:
        """Until the master is ALIVE; StackError naming its log when it exits or ``deadline`` passes."""
        self._wait_ready(deadline, timeout)

    def _readiness_probe(self) -> Callable[[], bool]:
        return self._alive

    def _alive(self) -> bool:
        # The master turns ALIVE after its RPC endpoint is bound (probing that port only adds log lines).
        view = read_master(self.webui_url)
        if view is None or view.state != "ALIVE":
            return False
        if view.url != self.master_url:
            raise self.failure(f"reports the URL {view.url}, not {self.master_url}")
        return True

    def _not_ready_in_time(self, timeout: float) -> str:
        return f"did not answer on {self.master_url} and {self.webui_url} within {timeout:.0f}s"


# --------------------------------------------------------------------------- the cluster


class SparkStandaloneCluster:
    """A standalone master and ``workers`` workers under ``work_dir``, listening on ``host`` only."""

    def __init__(
        self,
        work_dir: Path,
        workers: int,
        host: str = LOOPBACK,
        *,
        log_dir: Path | None = None,
        master_port: int | None = None,
        webui_port: int | None = None,
        worker_cores: int | None = None,
        worker_memory: str | int | None = None,
        worker_env: Mapping[str, str] | None = None,
    ) -> None:
        if workers < 1:
            raise ConfigurationError(f"a Spark cluster needs at least 1 worker, not {workers}")
        if worker_cores is not None and worker_cores < 1:
            raise ConfigurationError(f"Spark worker cores must be at least 1, not {worker_cores}")
        self.work_dir = Path(work_dir).resolve()
        self.workers = workers
        self.host = host
        self.log_dir = Path(log_dir).resolve() if log_dir else self.work_dir
        share_cores, share_memory = worker_share(workers)
        self.worker_cores = worker_cores or share_cores
        if isinstance(worker_memory, int):
            self.worker_memory_mb = worker_memory
        else:
            self.worker_memory_mb = parse_memory_mb(worker_memory) if worker_memory else share_memory
        self.master_port = master_port or free_port(host)
        self.webui_port = webui_port or free_port(host, exclude=[self.master_port])
        # Added to the workers' environment, which their executors inherit: the object store's address and keys,
        # for the executors to write the lakehouse's files (never on a command line).
        self.worker_env = dict(worker_env or {})
        self.master_pid: int | None = None
        self.worker_pids: list[int | None] = [None] * workers
        # The processes this object started: "master", "worker-<i>".
        self._procs: dict[str, SparkDaemon] = {}

    # ------------------------------------------------------------------ state (stack.json)

    def record(self) -> dict[str, Any]:
        """What a later process needs to find, inspect and stop this cluster."""
        return {
            "workers": self.workers,
            "worker_cores": self.worker_cores,
            "worker_memory_mb": self.worker_memory_mb,
            "port": self.master_port,
            "webui_port": self.webui_port,
            "pid": self.master_pid,
            "worker_pids": list(self.worker_pids),
            "object_store": bool(self.worker_env),
        }

    @classmethod
    def from_record(
        cls, work_dir: Path, record: dict[str, Any], host: str = LOOPBACK, *, log_dir: Path | None = None
    ) -> SparkStandaloneCluster:
        cluster = cls(
            work_dir,
            int(record["workers"]),
            host,
            log_dir=log_dir,
            master_port=record.get("port"),
            webui_port=record.get("webui_port"),
            worker_cores=record.get("worker_cores"),
            worker_memory=record.get("worker_memory_mb"),
        )
        cluster.master_pid = record.get("pid")
        pids = list(record.get("worker_pids") or [])
        cluster.worker_pids = (pids + [None] * cluster.workers)[: cluster.workers]
        return cluster

    # ------------------------------------------------------------------ layout

    @property
    def master_url(self) -> str:
        return f"spark://{self.host}:{self.master_port}"

    @property
    def webui_url(self) -> str:
        return f"http://{self.host}:{self.webui_port}"

    @property
    def conf_dir(self) -> Path:
        return self.work_dir / "conf"

    @property
    def master_conf_file(self) -> Path:
        return self.work_dir / "master.conf"

    def worker_conf_file(self, index: int) -> Path:
        return self.work_dir / f"worker-{index}.conf"

    def worker_dir(self, index: int) -> Path:
        return self.work_dir / f"worker-{index}"

    @property
    def master_log_file(self) -> Path:
        return self.log_dir / "spark-master.log"

    def worker_log_file(self, index: int) -> Path:
        return self.log_dir / f"spark-worker-{index}.log"

    @property
    def worker_indexes(self) -> range:
        return range(1, self.workers + 1)

    def master_running(self) -> bool:
        return pid_matches(self.master_pid, str(self.master_conf_file))

    def worker_running(self, index: int) -> bool:
        return pid_matches(self.worker_pids[index - 1], str(self.worker_conf_file(index)))

    def worker_address(self, index: int) -> str | None:
        """host:port of worker ``index``'s RPC endpoint (as the master lists it), from its latest start's log."""
        found = _WORKER_STARTED.findall(output_since_last_start(self.worker_log_file(index), 400))
        return found[-1] if found else None

    @property
    def running(self) -> bool:
        """The master and every worker process are alive (see :meth:`status` for what the master says)."""
        return self.master_running() and all(self.worker_running(i) for i in self.worker_indexes)

    # ------------------------------------------------------------------ the driver's side

    def driver_conf(self) -> dict[str, str]:
        """Settings for a driver (the Spark Connect server) of this cluster: it listens where the executors can
        reach it, asks for one executor per worker that fits it, starts no job before every executor registered,
        and executors run Python with this interpreter."""
        return {
            "spark.master": self.master_url,
            "spark.driver.host": self.host,
            "spark.driver.bindAddress": self.host,
            "spark.executor.cores": str(self.worker_cores),
            # At most the worker's memory, or the master never places an executor on it.
            "spark.executor.memory": f"{self.worker_memory_mb}m",
            "spark.executorEnv.PYSPARK_PYTHON": sys.executable,
            "spark.scheduler.minRegisteredResourcesRatio": "1.0",
            "spark.scheduler.maxRegisteredResourcesWaitingTime": "60s",
            # The embedded driver's UI stays off, as in local mode; the master's web UI shows the cluster.
            "spark.ui.enabled": "false",
        }

    # ------------------------------------------------------------------ processes

    def environment(self) -> dict[str, str]:
        env = spark_environment(self.host)  # SPARK_LOCAL_IP: the web UIs bind there
        env["SPARK_CONF_DIR"] = str(self.conf_dir)  # ours only: no foreign spark-env.sh or spark-defaults.conf
        env["SPARK_DAEMON_MEMORY"] = DAEMON_MEMORY
        for name in (
            "SPARK_MASTER",
            "SPARK_WORKER_DIR",
            "SPARK_WORKER_OPTS",
            "SPARK_MASTER_OPTS",
            "SPARK_DAEMON_JAVA_OPTS",
        ):
            env.pop(name, None)
        return env

    def master_command(self) -> list[str]:
        return [
            str(pyspark_home() / "bin" / "spark-class"),
            MASTER_CLASS,
            "--host",
            self.host,
            "--port",
            str(self.master_port),
            "--webui-port",
            str(self.webui_port),
            "--properties-file",
            str(self.master_conf_file),
        ]

    def worker_command(self, index: int) -> list[str]:
        return [
            str(pyspark_home() / "bin" / "spark-class"),
            WORKER_CLASS,
            "--host",
            self.host,
            "--webui-port",
            "0",  # any free port
            "--cores",
            str(self.worker_cores),
            "--memory",
            f"{self.worker_memory_mb}m",
            "--work-dir",
            str(self.worker_dir(index)),
            "--properties-file",
            str(self.worker_conf_file(index)),
            self.master_url,
        ]

    def _write_files(self) -> None:
        self.work_dir.mkdir(parents=True, exist_ok=True)
        self.conf_dir.mkdir(exist_ok=True)
        (self.conf_dir / "log4j2.properties").write_text(_LOG4J2)
        self.master_conf_file.write_text(
            "# Written by streaming_pipeline.devstack.embedded.spark_cluster: the master's --properties-file.\n"
            "# A busy port is an error naming it, not a silent move to the next port.\n"
            "spark.port.maxRetries 0\n"
        )
        for index in self.worker_indexes:
            local = self.worker_dir(index) / "local"
            local.mkdir(parents=True, exist_ok=True)
            self.worker_conf_file(index).write_text(
                "# Written by streaming_pipeline.devstack.embedded.spark_cluster: a worker's --properties-file.\n"
                f"spark.local.dir {local}\n"
                "# Application folders (executor logs, fetched jars) of finished applications go after a day.\n"
                "spark.worker.cleanup.enabled true\n"
                "spark.worker.cleanup.appDataTtl 86400\n"
            )

    def start(self, timeout: float = 120.0, progress: Progress | None = None) -> SparkStandaloneCluster:
        """Start the master, then the workers; return once all ``workers`` are ALIVE at the master.

        Raises StackError naming the log of the process that failed (and stops whatever it started)."""
        say = progress or _quiet
        if self.running and self._alive_count() == self.workers:
            return self
        self._check_master_ports()
        env = self.environment()
        self._write_files()
        deadline = time.monotonic() + timeout
        try:
            self._start_master(env, deadline, timeout, say)
            self._start_workers(env, say)
            self._wait_for_workers(deadline, timeout)
        except BaseException:
            self.stop(timeout=10)
            raise
        return self

    def _check_master_ports(self) -> None:
        for port, what in ((self.master_port, "port"), (self.webui_port, "web UI port")):
            if not is_port_free(port, self.host):
                raise StackError(
                    f"cannot start the Spark master: its {what} {port} on {self.host} is in use by another "
                    f"process; stop that process or let the stack pick another port. Log: {self.master_log_file}"
                )

    def _start_master(self, env: Mapping[str, str], deadline: float, timeout: float, say: Progress) -> None:
        """Start the master and wait until it is ALIVE; on other ports when another process took one of its own."""
        for attempt in range(1, MASTER_START_ATTEMPTS + 1):
            say(
                f"Starting the Spark master on {self.master_url} (web UI {self.webui_url}, log: {self.master_log_file})"
            )
            master = SparkMaster(self.master_url, self.webui_url, self.master_log_file)
            self.master_pid = master.launch(
                self.master_command(), env, self.work_dir, f"Spark master on {self.master_url}"
            )
            self._procs["master"] = master
            try:
                master.wait_alive(deadline, timeout)
                return
            except StackError:
                lost_port = _BIND_FAILED.search(output_since_last_start(self.master_log_file, 400))
                if not lost_port or attempt == MASTER_START_ATTEMPTS or not master.exited:
                    raise
                # Someone took a port after it was chosen: choose again (no client is configured with them).
                self.master_port = free_port(self.host, exclude=[self.master_port, self.webui_port])
                self.webui_port = free_port(self.host, exclude=[self.master_port, self.webui_port])
                say(
                    f"The Spark master lost a port to another process; trying ports {self.master_port} and "
                    f"{self.webui_port}"
                )

    def _start_workers(self, env: Mapping[str, str], say: Progress) -> None:
        for index in self.worker_indexes:
            say(
                f"Starting Spark worker {index} of {self.workers}: {self.worker_cores} core(s), "
                f"{self.worker_memory_mb} MiB (log: {self.worker_log_file(index)})"
            )
            worker = SparkDaemon(
                f"Spark worker {index} of {self.workers} ({self.master_url})", self.worker_log_file(index)
            )
            self.worker_pids[index - 1] = worker.launch(
                self.worker_command(index),
                {**env, **self.worker_env},
                self.worker_dir(index),
                f"Spark worker {index} of {self.master_url}",
            )
            self._procs[f"worker-{index}"] = worker

    def _alive_count(self) -> int:
        view = read_master(self.webui_url)
        return len(view.workers) if view else 0

    def _wait_for_workers(self, deadline: float, timeout: float) -> None:
        master = self._procs["master"]
        workers = [self._procs[f"worker-{index}"] for index in self.worker_indexes]
        while True:
            if master.exited:
                raise master.failure("exited while the workers started")
            for worker in workers:
                if worker.exited:
                    raise worker.failure("exited during start-up")
            if self._alive_count() >= self.workers:
                return
            if time.monotonic() > deadline:
                raise self._late_workers(timeout)
            time.sleep(0.25)

    def _late_workers(self, timeout: float) -> StackError:
        """The error when fewer workers than started are ALIVE at the deadline: one that never registered, if any."""
        waiting = [
            i for i in self.worker_indexes if REGISTERED not in output_since_last_start(self.worker_log_file(i), 400)
        ]
        if waiting:
            return self._procs[f"worker-{waiting[0]}"].failure(
                f"did not register with the master within {timeout:.0f}s"
            )
        return self._procs["master"].failure(f"lists fewer than {self.workers} ALIVE workers after {timeout:.0f}s")

    def stop(self, timeout: float = 30.0, progress: Progress | None = None) -> bool:
        """Stop the workers (each with its executors: the whole process group), then the master: SIGTERM, then
        SIGKILL after ``timeout`` s. Only processes this object started, or whose command line is ours, are
        signalled. Returns True when any of them was running."""
        say = progress or _quiet
        stopped = False
        for index in self.worker_indexes:
            pid = self.worker_pids[index - 1]
            if pid and (self._own_and_alive(f"worker-{index}") or self.worker_running(index)):
                stop_announced(pid, f"Spark worker {index}", timeout, say)
                stopped = True
            self.worker_pids[index - 1] = None
        if self.master_pid and (self._own_and_alive("master") or self.master_running()):
            stop_announced(self.master_pid, "the Spark master", timeout, say)
            stopped = True
        self.master_pid = None
        self._procs.clear()
        return stopped

    def _own_and_alive(self, key: str) -> bool:
        daemon = self._procs.get(key)
        return daemon is not None and daemon.pid is not None and not daemon.exited

    def status(self) -> SparkClusterStatus:
        master_up = self.master_running()
        view = read_master(self.webui_url) if master_up else None
        master = ClusterProcess(
            "spark-master", self.master_pid if master_up else None, master_up, self.master_log_file, self.master_url
        )
        workers = []
        for index in self.worker_indexes:
            up = self.worker_running(index)
            workers.append(
                ClusterProcess(
                    f"spark-worker-{index}",
                    self.worker_pids[index - 1] if up else None,
                    up,
                    self.worker_log_file(index),
                    self.worker_address(index) if up else None,
                )
            )
        return SparkClusterStatus(
            workers_wanted=self.workers,
            worker_cores=self.worker_cores,
            worker_memory_mb=self.worker_memory_mb,
            master_url=self.master_url if master_up else None,
            webui_url=self.webui_url if master_up else None,
            master=master,
            workers=tuple(workers),
            alive=view.workers if view else (),
        )

    def __repr__(self) -> str:
        state = "running" if self.running else "stopped"
        return f"SparkStandaloneCluster({self.master_url}, {self.workers} workers, {self.work_dir}, {state})"
