"""The engine's log store for local disks: built once into the cache, registered for `file:` by every Spark driver
of the project, and listing exactly what Delta's own LocalLogStore lists, in the same order."""

from __future__ import annotations

import logging
import zipfile
from pathlib import Path
from typing import Any

import pytest

from streaming_pipeline.lakehouse.engine import jars, log_store
from streaming_pipeline.lakehouse.engine import spark as spark_module
from streaming_pipeline.lakehouse.engine.log_store import LOG_STORE_CLASS, LOG_STORE_CONF

CLASS_FILE = LOG_STORE_CLASS.replace(".", "/") + ".class"


def test_the_store_is_compiled_once_into_the_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    engine_jars = jars.spark_jars()  # from the real cache, before the test's own
    monkeypatch.setenv("STREAMING_PIPELINE_CACHE_DIR", str(tmp_path))
    built = log_store.log_store_jar(engine_jars, jars.pyspark_home() / "jars")
    assert built is not None and built.parent.parent == tmp_path / "jars"
    with zipfile.ZipFile(built) as archive:
        assert sorted(archive.namelist()) == ["META-INF/MANIFEST.MF", CLASS_FILE]
    # Built: the next call takes it from the cache and needs no compiler.
    monkeypatch.setattr(log_store, "find_javac", lambda: pytest.fail("compiled a second time"))
    assert log_store.log_store_jar(engine_jars, jars.pyspark_home() / "jars") == built


def test_without_javac_the_engine_keeps_deltas_store_and_says_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv("STREAMING_PIPELINE_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(jars, "spark_jars", lambda: [Path("/engine/delta-spark.jar")])
    monkeypatch.setattr(log_store, "find_javac", lambda: None)
    log_store._warn_no_javac.cache_clear()
    with caplog.at_level(logging.WARNING, logger=log_store.__name__):
        conf = spark_module.engine_conf("local")
    assert conf["spark.jars"] == "/engine/delta-spark.jar"
    assert LOG_STORE_CONF not in conf
    assert "No javac (JDK) found" in caplog.text and "stats every file of _delta_log" in caplog.text


def test_every_driver_registers_it_for_file_paths_unless_told_otherwise() -> None:
    conf = spark_module.engine_conf("local")
    assert conf[LOG_STORE_CONF] == LOG_STORE_CLASS
    assert conf["spark.jars"].split(",")[-1].endswith(log_store.JAR_NAME)
    own = spark_module.engine_conf("local", extra={LOG_STORE_CONF: "io.delta.storage.LocalLogStore"})
    assert own[LOG_STORE_CONF] == "io.delta.storage.LocalLogStore"
    assert log_store.JAR_NAME not in own["spark.jars"]


def _listing(spark: Any, store: Any, start: str) -> list[tuple[str, int, bool]]:
    hadoop_conf = spark._jsc.hadoopConfiguration()
    found = store.listFrom(spark._jvm.org.apache.hadoop.fs.Path(start), hadoop_conf)
    listed = []
    while found.hasNext():
        status = found.next()
        listed.append((status.getPath().getName(), status.getLen(), status.isDirectory()))
    return listed


@pytest.mark.integration
def test_it_lists_what_deltas_local_log_store_lists(spark: Any, tmp_path: Path) -> None:
    assert spark.conf.get(LOG_STORE_CONF) == LOG_STORE_CLASS  # the test session's engine uses it
    table = tmp_path / "table"
    for batch in range(12):  # a checkpoint at version 10, commits after it
        spark.createDataFrame([(batch,)], "id INT").write.format("delta").mode("append").save(str(table))
    log_dir = table / "_delta_log"
    (log_dir / ".00000000000000000013.json.tmp").write_text("{}")  # a writer's temporary file
    (log_dir / "!before-every-version").write_text("")
    (log_dir / "_sidecars").mkdir(exist_ok=True)
    jvm = spark._jvm
    hadoop_conf = spark._jsc.hadoopConfiguration()
    ours = jvm.streamingpipeline.delta.FastListFromLocalLogStore(hadoop_conf)
    deltas = jvm.io.delta.storage.LocalLogStore(hadoop_conf)
    expected_names = sorted(path.name for path in log_dir.iterdir() if path.name >= "00000000000000000010.")
    for version in (0, 9, 10, 11, 12):
        start = f"file:{log_dir}/{version:020d}."
        assert _listing(spark, ours, start) == _listing(spark, deltas, start)
    listed_from_10 = _listing(spark, ours, f"file:{log_dir}/{10:020d}.")
    assert [name for name, _, _ in listed_from_10] == expected_names
    assert ("_sidecars", True) in [(name, is_dir) for name, _, is_dir in listed_from_10]
    assert "_last_checkpoint" in expected_names
    assert spark.read.format("delta").load(str(table)).count() == 12

    with pytest.raises(Exception, match="FileNotFoundException"):
        ours.listFrom(jvm.org.apache.hadoop.fs.Path(f"file:{tmp_path}/missing/_delta_log/{0:020d}."), hadoop_conf)
