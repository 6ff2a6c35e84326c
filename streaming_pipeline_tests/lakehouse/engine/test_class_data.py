"""The class-data sharing archive of Spark's JVMs (engine/class_data.py)."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from streaming_pipeline.lakehouse.engine import class_data, jars


@pytest.fixture()
def fake_pyspark(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A cache of the test's own, and a pyspark distribution of two jars."""
    monkeypatch.setenv("STREAMING_PIPELINE_CACHE_DIR", str(tmp_path / "cache"))
    home = tmp_path / "pyspark"
    (home / "jars").mkdir(parents=True)
    for name in ("spark-core_2.13-4.2.0.jar", "spark-sql_2.13-4.2.0.jar"):
        (home / "jars" / name).write_bytes(b"jar")
    monkeypatch.setattr(jars, "pyspark_home", lambda: home)
    return home


def test_the_archive_is_named_after_the_jdk_and_pyspark_s_jars(fake_pyspark: Path, tmp_path: Path) -> None:
    first = class_data.archive_path()
    assert first.parent == tmp_path / "cache" / "class-data" and first.suffix == ".jsa"
    assert class_data.archive_path() == first
    (fake_pyspark / "jars" / "spark-sql_2.13-4.2.0.jar").write_bytes(b"another build")
    assert class_data.archive_path() != first


def test_a_driver_maps_the_archive_once_there_is_one_and_starts_its_training_until_then(
    fake_pyspark: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    trained: list[Path] = []
    monkeypatch.setattr(class_data, "_start_training", trained.append)
    conf = {"spark.driver.extraJavaOptions": "-Dmine=1", "spark.master": "local[1]"}
    assert class_data.with_java_options(conf) == conf  # no archive yet: started as before, and a training run starts
    archive = class_data.archive_path()
    assert trained == [archive]
    archive.parent.mkdir(parents=True)
    archive.write_bytes(b"archive")
    options = f"-Dmine=1 -XX:SharedArchiveFile={archive} -Xlog:cds=off -Xlog:cds+dynamic=off"
    assert class_data.with_java_options(conf) == {"spark.master": "local[1]", "spark.driver.extraJavaOptions": options}
    # The training run's own options (which name the archive it writes) are left as they are.
    training = {"spark.driver.extraJavaOptions": f"-XX:ArchiveClassesAtExit={archive}.1.partial"}
    assert class_data.with_java_options(training) == training
    assert trained == [archive]


# A local driver started as the project starts one (its options get the archive's), logging where each class came
# from: Spark's own come from the archive.
CLASS_SOURCES = """
import sys
from streaming_pipeline.lakehouse.engine.spark import engine_conf, start_local_session
conf = engine_conf("local", "local[1]")
conf["spark.driver.extraJavaOptions"] = f"-Xlog:class+load=info:file={sys.argv[1]}"
start_local_session(conf).range(3).count()
"""


@pytest.mark.integration
@pytest.mark.slow
def test_spark_s_classes_come_from_the_archive_the_project_makes(tmp_path: Path) -> None:
    """The archive of the machine's cache (made here when missing, or by a training run already in flight), then a
    driver in a process of its own that maps it."""
    archive = class_data.archive_path()
    archive.parent.mkdir(parents=True, exist_ok=True)
    deadline = time.monotonic() + 300
    while not class_data.train(archive):  # another process is making it
        assert time.monotonic() < deadline, f"no archive at {archive}: see {archive.with_suffix('.log')}"
        time.sleep(2)
    log = tmp_path / "classes.log"
    done = subprocess.run(
        [sys.executable, "-c", CLASS_SOURCES, str(log)], capture_output=True, text=True, timeout=300, check=False
    )
    assert done.returncode == 0, done.stderr[-3000:]
    sources = dict(
        line.split("] ", 1)[1].split(" source: ", 1) for line in log.read_text().splitlines() if " source: " in line
    )
    assert sources["org.apache.spark.SparkContext"] == "shared objects file (top)", sources.get(
        "org.apache.spark.SparkContext"
    )
    assert "cds" not in done.stdout + done.stderr  # the JVM's CDS messages are off
