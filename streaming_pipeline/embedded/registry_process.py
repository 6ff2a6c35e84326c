"""Run the project's schema registry (``python -m streaming_pipeline.registry``) as a background process."""

from __future__ import annotations

import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from types import TracebackType

from streaming_pipeline.embedded.ports import LOOPBACK, free_port, is_port_free
from streaming_pipeline.embedded.processes import (
    output_since_last_start,
    pid_alive,
    python_env_with_project,
    start_background,
    stop_pid,
)
from streaming_pipeline.errors import StackError

REGISTRY_MODULE = "streaming_pipeline.registry"


def registry_answers(url: str, timeout: float = 1.0) -> bool:
    """True when ``GET {url}/subjects`` answers 200."""
    try:
        with urllib.request.urlopen(f"{url}/subjects", timeout=timeout) as response:
            return response.status == 200
    except (urllib.error.URLError, OSError, ValueError):
        return False


class SchemaRegistryProcess:
    """``python -m streaming_pipeline.registry --host H --port P --data-dir DIR`` in the background."""

    def __init__(
        self,
        data_dir: Path,
        port: int | None = None,
        host: str = LOOPBACK,
        *,
        log_dir: Path | None = None,
        module: str = REGISTRY_MODULE,
    ) -> None:
        self.data_dir = Path(data_dir).resolve()
        self.host = host
        self.port: int = port if port is not None else free_port(host)
        self.log_dir = Path(log_dir).resolve() if log_dir else self.data_dir
        self.module = module
        self._proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    @property
    def log_file(self) -> Path:
        return self.log_dir / "registry.log"

    @property
    def running(self) -> bool:
        return self._proc is not None and pid_alive(self._proc.pid)

    def command(self) -> list[str]:
        return [
            sys.executable,
            "-m",
            self.module,
            "--host",
            self.host,
            "--port",
            str(self.port),
            "--data-dir",
            str(self.data_dir),
        ]

    def start(self, timeout: float = 30.0) -> SchemaRegistryProcess:
        """Start the registry and wait until ``GET /subjects`` answers 200 (StackError naming the log if not)."""
        if self.running:
            return self
        if not is_port_free(self.port, self.host):
            raise StackError(
                f"cannot start the schema registry: port {self.port} on {self.host} is already in use "
                "by another process; stop that process or choose another port"
            )
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self._proc = start_background(
            self.command(),
            self.log_file,
            env=python_env_with_project(),
            cwd=self.data_dir,
            label=f"schema registry ({self.module}) on {self.url}",
        )
        deadline = time.monotonic() + timeout
        try:
            while True:
                code = self._proc.poll()
                if code is not None:
                    raise self._failure(f"exited during start-up with code {code}")
                if registry_answers(self.url):
                    return self
                if time.monotonic() > deadline:
                    raise self._failure(f"did not answer GET {self.url}/subjects within {timeout:.0f}s")
                time.sleep(0.1)
        except BaseException:
            stop_pid(self._proc.pid, timeout=5)
            raise

    def _failure(self, what: str) -> StackError:
        output = output_since_last_start(self.log_file, 15)
        return StackError(
            f"the schema registry {what}. See its log {self.log_file}."
            + (f"\nLast lines:\n{output}" if output.strip() else "")
        )

    def stop(self, timeout: float = 30.0) -> None:
        """SIGTERM the registry, SIGKILL after ``timeout`` seconds. Its data is kept."""
        if self._proc is None:
            return
        stop_pid(self._proc.pid, timeout=timeout)
        self._proc.poll()

    def __enter__(self) -> SchemaRegistryProcess:
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
        return f"SchemaRegistryProcess({self.url}, {self.data_dir}, {state})"
