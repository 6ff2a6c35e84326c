"""Delta's log store for local disks, with a `listFrom` whose cost does not grow with the log.

On every snapshot update (each query, stream trigger and commit) Delta-Spark asks its log store for the files of
`_delta_log` from the newest checkpoint on. Delta's `LocalLogStore` answers with Hadoop's `listStatus` of the whole
directory, which stats every file in it, about 30 µs per file on this project's machine: the cost grew with every
commit the log keeps (7 days of them, docs/maintenance.md). `FastListFromLocalLogStore` (jvm/, some 40 lines of
Java) reads the directory's names, keeps those from the requested one on and stats only those: the same files in
the same order. Delta has this for S3 (`delta.enableFastS3AListFrom`, broken on Hadoop 3.5: spark_conf/cluster.conf);
for local disks it is delta-io/delta#2684.

The class is compiled once with the JDK's `javac`, against the engine's own Delta and Hadoop jars, into the project
cache (jars/log-store-<fingerprint>/), and every Spark driver of the project registers it for `file:` paths
(`spark.delta.logStore.file.impl`). Without a `javac` (a Java runtime only) the engine keeps Delta's own store, and
a warning says what that costs.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import logging
import os
import shutil
import subprocess
import tempfile
import zipfile
from importlib import resources
from pathlib import Path

from streaming_pipeline.lakehouse import settings
from streaming_pipeline.lakehouse.engine.jars import is_valid_jar
from streaming_pipeline.lakehouse.engine.java import exclusive_lock, find_java
from streaming_pipeline.lakehouse.errors import ArtifactResolutionError, JavaNotFoundError

LOG_STORE_CLASS = "streamingpipeline.delta.FastListFromLocalLogStore"
LOG_STORE_CONF = "spark.delta.logStore.file.impl"
JAR_NAME = "fast-list-from-local-log-store.jar"
JAVA_RELEASE = "17"

log = logging.getLogger(__name__)


def java_source() -> bytes:
    return (
        resources.files("streaming_pipeline.lakehouse.engine") / "jvm" / "FastListFromLocalLogStore.java"
    ).read_bytes()


def find_javac() -> Path | None:
    """The JDK compiler beside the `java` the project runs, else $JAVA_HOME/bin/javac, else `javac` on PATH."""
    candidates = []
    with contextlib.suppress(JavaNotFoundError):  # no java at all: the driver's own start says so
        candidates.append(find_java().resolve().parent / "javac")
    java_home = settings.java_home()
    if java_home:
        candidates.append(Path(java_home) / "bin" / "javac")
    on_path = shutil.which("javac")
    if on_path:
        candidates.append(Path(on_path))
    return next((javac for javac in candidates if javac.is_file() and os.access(javac, os.X_OK)), None)


def log_store_jar(engine_jars: list[Path], pyspark_jars: Path) -> Path | None:
    """The jar of FastListFromLocalLogStore for this engine, compiled into the cache the first time; None without javac.

    `engine_jars` are the resolved Spark jars (Delta among them), `pyspark_jars` pyspark's own jars/ (Hadoop).
    Raises ArtifactResolutionError with javac's message when the source does not compile against them.
    """
    fingerprint = hashlib.sha256(
        java_source() + JAVA_RELEASE.encode() + "\n".join(sorted(jar.name for jar in engine_jars)).encode()
    ).hexdigest()[:12]
    directory = settings.cache_root() / "jars" / f"log-store-{fingerprint}"
    jar = directory / JAR_NAME
    if is_valid_jar(jar):
        return jar
    javac = find_javac()
    if javac is None:
        _warn_no_javac()
        return None
    with exclusive_lock(directory / ".lock"):
        if is_valid_jar(jar):
            return jar  # another process compiled it while we waited
        _compile(javac, engine_jars, pyspark_jars, jar)
    return jar


def _compile(javac: Path, engine_jars: list[Path], pyspark_jars: Path, jar: Path) -> None:
    classpath = os.pathsep.join([*(str(path) for path in engine_jars), str(pyspark_jars / "*")])
    with tempfile.TemporaryDirectory(prefix="log-store-", dir=jar.parent) as work:
        source = Path(work) / "FastListFromLocalLogStore.java"
        source.write_bytes(java_source())
        classes = Path(work) / "classes"
        command = [str(javac), "--release", JAVA_RELEASE, "-nowarn", "-cp", classpath, "-d", str(classes), str(source)]
        done = subprocess.run(command, capture_output=True, text=True, timeout=300, check=False)
        if done.returncode != 0:
            raise ArtifactResolutionError(
                f"{javac} could not compile {LOG_STORE_CLASS} against the engine's Delta and Hadoop jars:\n"
                f"{done.stderr.strip() or done.stdout.strip()}"
            )
        partial = Path(work) / JAR_NAME
        with zipfile.ZipFile(partial, "w", zipfile.ZIP_DEFLATED) as archive:
            archive.writestr("META-INF/MANIFEST.MF", "Manifest-Version: 1.0\r\n\r\n")
            for class_file in sorted(classes.rglob("*.class")):
                archive.write(class_file, class_file.relative_to(classes).as_posix())
        partial.replace(jar)


@functools.cache
def _warn_no_javac() -> None:
    log.warning(
        "No javac (JDK) found beside java, in JAVA_HOME or on PATH: Delta keeps its own log store for local disks, "
        "which stats every file of _delta_log on each snapshot update, so queries and commits slow down as a "
        "table's log grows. Install a JDK %s+ (e.g. `apt-get install openjdk-17-jdk-headless`) to build %s.",
        JAVA_RELEASE,
        LOG_STORE_CLASS,
    )
