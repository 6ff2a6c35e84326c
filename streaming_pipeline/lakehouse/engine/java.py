"""Java for the engine: the `java` to run (17 or newer, from JAVA_HOME or PATH) and a file lock that lets one
process at a time resolve the jars the JVM needs."""

from __future__ import annotations

import contextlib
import functools
import os
import re
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

from streaming_pipeline.lakehouse import settings
from streaming_pipeline.lakehouse.errors import JavaNotFoundError

MIN_JAVA_VERSION = 17


@functools.lru_cache(maxsize=16)
def java_major_version(java: str) -> int | None:
    """The major version `java -version` reports (8 for "1.8.0_x", 17 for "17.0.15"), None if unknown."""
    try:
        done = subprocess.run([java, "-version"], capture_output=True, text=True, timeout=60, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    match = re.search(r'version "(\d+)(?:\.(\d+))?', done.stderr + done.stdout)
    if not match:
        return None
    major = int(match.group(1))
    if major == 1 and match.group(2):
        major = int(match.group(2))
    return major


def find_java() -> Path:
    """The `java` executable to run the broker with: $JAVA_HOME/bin/java, else `java` on PATH.

    Raises JavaNotFoundError (saying where it looked) when there is none or it is older than 17.
    """
    looked: list[str] = []
    candidates: list[Path] = []
    java_home = settings.java_home()
    if java_home:
        home_java = Path(java_home) / "bin" / ("java.exe" if os.name == "nt" else "java")
        if home_java.is_file() and os.access(home_java, os.X_OK):
            candidates.append(home_java)
        else:
            looked.append(f"JAVA_HOME={java_home} has no executable bin/java")
    else:
        looked.append("JAVA_HOME is not set")
    on_path = shutil.which("java")
    if on_path:
        candidates.append(Path(on_path))
    else:
        looked.append(f"no `java` on PATH ({settings.executable_path()!r})")

    too_old: list[str] = []
    for java in candidates:
        major = java_major_version(str(java))
        if major is None:
            too_old.append(f"{java} did not report a version")
        elif major < MIN_JAVA_VERSION:
            too_old.append(f"{java} is Java {major}")
        else:
            return java
    detail = "; ".join(looked + too_old)
    raise JavaNotFoundError(
        f"Java {MIN_JAVA_VERSION}+ is needed to run the embedded Kafka broker, but none was found "
        f"({detail}). Install a JDK/JRE {MIN_JAVA_VERSION} or newer "
        "(e.g. `apt-get install openjdk-17-jre-headless`) and put it on PATH or set JAVA_HOME."
    )


@contextlib.contextmanager
def exclusive_lock(lock_file: Path) -> Iterator[None]:
    """Hold an exclusive lock on ``lock_file`` (flock; made with its folder when missing): one process at a time."""
    import fcntl

    lock_file.parent.mkdir(parents=True, exist_ok=True)
    with open(lock_file, "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)
