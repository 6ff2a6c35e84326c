"""Every Java artifact: resolved once by Apache Ivy from Maven Central into the project cache, checked complete."""

from __future__ import annotations

from pathlib import Path

import pytest

from streaming_pipeline.lakehouse import settings
from streaming_pipeline.lakehouse.engine import jars
from streaming_pipeline.lakehouse.errors import ArtifactResolutionError

pytestmark = pytest.mark.integration

SMALL_SET = jars.ArtifactSet(
    name="test-small",
    coordinates=(("org.slf4j", "slf4j-api", "2.0.16"), ("org.apache.commons", "commons-pool2", "2.12.0")),
)


def _names(classpath: list[Path]) -> list[str]:
    return sorted(p.name.split("__")[-1] for p in classpath)


@pytest.fixture
def private_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty home for every cache, for this process and for the JVMs it starts."""
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("JAVA_TOOL_OPTIONS", f"-Duser.home={home}")
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    monkeypatch.delenv(settings.CACHE_DIR, raising=False)
    monkeypatch.delenv(jars.REPOSITORY_ENV, raising=False)
    return home


def test_both_sets_resolve_into_complete_cached_classpaths_without_what_pyspark_ships() -> None:
    """In the cache the session resolved into (its broker and engine started from it). Resolving both sets from an
    empty cache over the network is CI's own first step: `.ci/run` runs the demo with an empty home for every cache."""
    broker = jars.broker_classpath(progress=None)
    names = _names(broker)
    assert f"kafka_2.13-{jars.KAFKA_VERSION}.jar" in names
    assert f"kafka-clients-{jars.KAFKA_VERSION}.jar" in names
    assert f"log4j-core-{jars.LOG4J_VERSION}.jar" in names and f"log4j-slf4j2-impl-{jars.LOG4J_VERSION}.jar" in names
    assert [n for n in names if n.startswith("slf4j-api-")] == [f"slf4j-api-{jars.SLF4J_VERSION}.jar"]

    spark = jars.spark_jars(progress=None)
    assert all(jar.is_relative_to(settings.cache_root()) for jar in [*broker, *spark])
    spark_version, delta_version = jars.spark_versions()
    assert (spark_version, delta_version) == ("4.2.0", "4.4.0")  # the pair pinned in pyproject.toml
    assert {
        "delta-spark_4.2_2.13-4.4.0.jar",
        "delta-storage-4.4.0.jar",
        "spark-sql-kafka-0-10_2.13-4.2.0.jar",
        "spark-token-provider-kafka-0-10_2.13-4.2.0.jar",
        "spark-avro_2.13-4.1.1.jar",  # the stand-in: Maven Central has no spark-avro 4.2.0
    } <= set(_names(spark))
    # Nothing pyspark ships already (Hadoop, Scala, Jackson, slf4j, ...): those would only shadow its own jars.
    shipped = jars.pyspark_jar_modules()
    assert {"spark-sql_2.13", "hadoop-client-api", "scala-library", "jackson-databind"} <= shipped
    assert not [name for name in _names(spark) if jars._JAR_NAME.match(name).group("module") in shipped]

    for classpath in (broker, spark):
        assert all(jars.is_valid_jar(jar) for jar in classpath)
    messages: list[str] = []
    assert jars.resolve(jars.spark_artifacts(), progress=messages.append) == spark
    assert messages == []  # served from the cache: no resolver ran


def test_a_pom_without_its_jar_in_a_foreign_maven_repository_cannot_break_resolution(private_home: Path) -> None:
    # What another tool (mvn) left behind: slf4j-api 2.0.16's POM with no jar.
    foreign = private_home / ".m2" / "repository" / "org" / "slf4j" / "slf4j-api" / "2.0.16"
    foreign.mkdir(parents=True)
    (foreign / "slf4j-api-2.0.16.pom").write_text("<project><modelVersion>4.0.0</modelVersion></project>")

    classpath = jars.resolve(SMALL_SET, progress=None)
    assert _names(classpath) == ["commons-pool2-2.12.0.jar", "slf4j-api-2.0.16.jar"]
    assert all(jars.is_valid_jar(jar) for jar in classpath)
    assert all(str(jar).startswith(str(private_home / ".cache" / "streaming-pipeline")) for jar in classpath)
    assert not (foreign / "slf4j-api-2.0.16.jar").exists()  # the foreign repository was not used at all


def test_a_damaged_jar_in_the_cache_is_a_miss_and_is_resolved_again(private_home: Path) -> None:
    classpath = jars.resolve(SMALL_SET, progress=None)
    damaged = next(jar for jar in classpath if "slf4j" in jar.name)
    damaged.write_bytes(damaged.read_bytes()[:100])
    assert jars.cached_classpath(SMALL_SET) is None
    messages: list[str] = []
    again = jars.resolve(SMALL_SET, progress=messages.append)
    assert any("Resolving" in m for m in messages)
    assert again == classpath and all(jars.is_valid_jar(jar) for jar in again)


def test_an_artifact_that_does_not_exist_is_named_with_the_repository(private_home: Path) -> None:
    missing = jars.ArtifactSet(
        name="test-missing", coordinates=(("org.apache.spark", "spark-token-provider-kafka-0-10_2.13", "9.9.9"),)
    )
    with pytest.raises(ArtifactResolutionError) as caught:
        jars.resolve(missing, progress=None)
    message = str(caught.value)
    assert "org.apache.spark#spark-token-provider-kafka-0-10_2.13;9.9.9" in message
    assert jars.MAVEN_CENTRAL in message and "streaming-pipeline jars fetch" in message
    assert jars.cached_classpath(missing) is None


def test_an_unreachable_repository_gives_a_clear_error(private_home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(jars.REPOSITORY_ENV, "http://127.0.0.1:9/maven2")
    with pytest.raises(ArtifactResolutionError, match=r"http://127\.0\.0\.1:9/maven2/.*STREAMING_PIPELINE_MAVEN"):
        jars.resolve(SMALL_SET, progress=None)


def test_spark_sessions_start_from_explicit_jars_and_never_resolve() -> None:
    from streaming_pipeline.lakehouse.engine.spark import engine_conf

    conf = engine_conf("local")
    assert "spark.jars.packages" not in conf
    engine_jars = [Path(p) for p in conf["spark.jars"].split(",")]
    # The resolved set, then the engine's log store for local disks (engine/test_log_store.py), built from them.
    assert engine_jars[:-1] == jars.spark_jars()
    assert engine_jars[-1].name == "fast-list-from-local-log-store.jar"
