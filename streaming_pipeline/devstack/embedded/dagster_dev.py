"""`dagster dev` (webserver + daemon) as a subprocess pointed at an embedded stack: the path users run.

Used by `streaming-pipeline bench live` and by the live tests. The process gets its own process group,
so stopping it also stops the code server and the run processes the daemon launched.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import TracebackType

from streaming_pipeline.devstack.embedded.ports import LOOPBACK, free_port
from streaming_pipeline.devstack.embedded.processes import start_background, stop_pid, tail
from streaming_pipeline.devstack.errors import StackError

PROJECT_ROOT = Path(__file__).resolve().parents[3]
# Settings of the caller's shell that must not leak into a run pointed at another stack.
_FOREIGN_PREFIXES = (
    "SPARK_",
    "OFFSET_SENSOR_",
    "KAFKA_",
    "SCHEMA_REGISTRY_",
    "LAKEHOUSE_DIR",
    "DAGSTER_HOME",
    "LIVE_MODE",
    "CONTINUOUS_",
)
#: Settings of the machine, not of a stack, among those: they stay (where Spark keeps its scratch).
MACHINE_SETTINGS = ("SPARK_LOCAL_DIRS",)


class DagsterDev:
    """`dagster dev -w workspace.yaml` from the project root, with `env` (the stack's addresses) on top; or, with
    `target` and `cwd`, another project's (`-m its_package.definitions` in its folder)."""

    def __init__(
        self,
        env: Mapping[str, str],
        log_file: Path,
        *,
        port: int | None = None,
        target: Sequence[str] = ("-w", "workspace.yaml"),
        cwd: Path = PROJECT_ROOT,
    ) -> None:
        self.port = port or free_port()
        self.log_file = log_file
        self.target, self.cwd = list(target), cwd
        self.env = {k: v for k, v in os.environ.items() if k in MACHINE_SETTINGS or not k.startswith(_FOREIGN_PREFIXES)}
        self.env.update(env)
        self.env["PYTHONUNBUFFERED"] = "1"
        self._proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://{LOOPBACK}:{self.port}"

    @property
    def pid(self) -> int | None:
        """The `dagster dev` process (webserver, daemon, code server and runs are its descendants)."""
        return self._proc.pid if self._proc is not None else None

    @property
    def dagster_home(self) -> Path:
        return Path(self.env["DAGSTER_HOME"])

    def start(self, timeout: float = 120.0) -> DagsterDev:
        """Start it and wait until the webserver answers (the daemon starts alongside)."""
        if "DAGSTER_HOME" not in self.env:
            raise StackError("dagster dev needs DAGSTER_HOME (the embedded stack's `stack env` exports it)")
        self._proc = start_background(
            [sys.executable, "-m", "dagster", "dev", *self.target, "-h", LOOPBACK, "-p", str(self.port)],
            self.log_file,
            env=self.env,
            cwd=self.cwd,
            label=f"dagster dev on {self.url}",
        )
        deadline = time.monotonic() + timeout
        while True:
            if self._proc.poll() is not None:
                raise StackError(
                    f"dagster dev exited with {self._proc.returncode}; log {self.log_file}:\n{tail(self.log_file)}"
                )
            try:
                with urllib.request.urlopen(f"{self.url}/server_info", timeout=2) as response:
                    if response.status == 200:
                        return self
            except (urllib.error.URLError, OSError):
                pass
            if time.monotonic() > deadline:
                self.stop()
                raise StackError(f"dagster dev did not answer on {self.url} in {timeout:.0f} s; log {self.log_file}")
            time.sleep(0.5)

    def stop(self, timeout: float = 30.0) -> None:
        if self._proc is not None:
            stop_pid(self._proc.pid, timeout=timeout)
            self._proc.poll()

    def __enter__(self) -> DagsterDev:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()
