"""Every Java artifact the project needs, resolved once from Maven Central by one resolver into a project cache.

Five artifact sets: the Kafka broker's classpath; Spark's Delta/Kafka/Avro packages (for the Spark Connect server
and for in-process sessions); the development stack's object store (s3proxy); Hadoop's S3A connector, which a
Spark JVM adds only for a lakehouse on `s3a://`; and PostgreSQL's JDBC driver, for a table catalog whose metastore is
in PostgreSQL. Each is resolved by Apache Ivy, whose standalone jar ships
in pyspark's ``jars/`` folder, with settings of our own: Maven Central only (or
$STREAMING_PIPELINE_MAVEN_REPOSITORY) and a private Ivy cache. No foreign local repository (``~/.m2``,
``~/.ivy2``) is consulted, so a POM without its jar left there by another tool cannot break resolution.

Layout of the cache ($STREAMING_PIPELINE_CACHE_DIR, else $XDG_CACHE_HOME/streaming-pipeline, else
~/.cache/streaming-pipeline)::

    jars/ivy-cache/                     Ivy's download cache, shared by the sets (a lock on each download)
    jars/<set>-<fingerprint>/lib/*.jar  the retrieved closure of one set
    jars/<set>-<fingerprint>/classpath.txt, resolve.log
    jars/log-store-<fingerprint>/*.jar  the engine's log store for local disks (engine/log_store.py)

A set counts as resolved only when ``classpath.txt`` lists jars that all exist and are valid jar files;
anything less is resolved again. Every JVM the project starts gets these paths explicitly.

    streaming-pipeline jars fetch       # pre-fetch every set (then everything works offline)
    streaming-pipeline jars path spark  # print a classpath
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import importlib.util
import re
import shutil
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from xml.sax.saxutils import escape, quoteattr

from packaging.version import Version

from streaming_pipeline.lakehouse import settings
from streaming_pipeline.lakehouse.engine.java import exclusive_lock, find_java
from streaming_pipeline.lakehouse.errors import ArtifactResolutionError, EngineVersionError, IncompleteResolution
from streaming_pipeline.lakehouse.progress import Progress as ProgressReport

KAFKA_VERSION = "4.1.1"
SCALA_BINARY_VERSION = "2.13"
LOG4J_VERSION = "2.24.3"
# Kafka's pom brings slf4j-api 1.7.x; log4j-slf4j2-impl binds slf4j 2.x only, so pin the API to 2.x.
SLF4J_VERSION = "2.0.17"

BROKER_MAIN_CLASS = "kafka.Kafka"
STORAGE_TOOL_CLASS = "kafka.tools.StorageTool"

MAVEN_CENTRAL = "https://repo1.maven.org/maven2/"
REPOSITORY_ENV = settings.MAVEN_REPOSITORY
IVY_JAR_ENV = settings.IVY_JAR
RESOLVE_TIMEOUT_SECONDS = 1800

Progress = Callable[[str], None]
Coordinate = tuple[str, str, str]


@dataclass(frozen=True)
class ArtifactSet:
    """Maven coordinates resolved together; `provided_modules` are left out because the runtime has them."""

    name: str
    coordinates: tuple[Coordinate, ...]
    provided_modules: tuple[str, ...] = ()

    @property
    def fingerprint(self) -> str:
        text = "\n".join([":".join(c) for c in self.coordinates] + sorted(self.provided_modules))
        return hashlib.sha256(text.encode()).hexdigest()[:12]


def kafka_broker_artifacts(kafka_version: str = KAFKA_VERSION) -> ArtifactSet:
    """The broker and the log4j2 backend its artifacts do not bring."""
    return ArtifactSet(
        name=f"kafka-broker-{kafka_version}",
        coordinates=(
            ("org.apache.kafka", f"kafka_{SCALA_BINARY_VERSION}", kafka_version),
            ("org.apache.logging.log4j", "log4j-core", LOG4J_VERSION),
            ("org.apache.logging.log4j", "log4j-slf4j2-impl", LOG4J_VERSION),
            ("org.slf4j", "slf4j-api", SLF4J_VERSION),
        ),
    )


S3PROXY_VERSION = "4.1.0"
OBJECT_STORE_MAIN_CLASS = "org.gaul.s3proxy.Main"


def object_store_artifacts(s3proxy_version: str = S3PROXY_VERSION) -> ArtifactSet:
    """s3proxy, the development stack's S3-compatible object store (embedded.object_store). Ivy's conflict manager
    takes the newest jackson-annotations its dependencies ask for (2.2x), which its Jackson 3 needs; Maven's
    nearest-wins would take 2.18 and fail at start with NoClassDefFoundError (JsonSerializeAs)."""
    return ArtifactSet(name=f"s3proxy-{s3proxy_version}", coordinates=(("org.gaul", "s3proxy", s3proxy_version),))


POSTGRESQL_JDBC_VERSION = "42.7.14"


def metastore_jdbc_artifacts(version: str = POSTGRESQL_JDBC_VERSION) -> ArtifactSet:
    """PostgreSQL's JDBC driver, for a Hive metastore that several engines share in PostgreSQL (engine.catalog)."""
    return ArtifactSet(name=f"postgresql-jdbc-{version}", coordinates=(("org.postgresql", "postgresql", version),))


def pyspark_hadoop_version() -> str:
    """The Hadoop client version pyspark ships (`jars/hadoop-client-api-<version>.jar`)."""
    for jar in (pyspark_home() / "jars").glob("hadoop-client-api-*.jar"):
        match = _JAR_NAME.match(jar.name)
        if match:
            return match.group("version")
    raise ArtifactResolutionError(f"pyspark's jars ({pyspark_home() / 'jars'}) have no hadoop-client-api jar")


def s3a_artifacts() -> ArtifactSet:
    """Hadoop's S3A connector for the Hadoop client pyspark ships, with the AWS SDK bundle its POM names (about
    690 MB): resolved only for a lakehouse on `s3a://`."""
    hadoop_version = pyspark_hadoop_version()
    return ArtifactSet(
        name=f"hadoop-aws-{hadoop_version}",
        coordinates=(("org.apache.hadoop", "hadoop-aws", hadoop_version),),
        provided_modules=tuple(sorted(pyspark_jar_modules())),
    )


# Maven Central has no spark-avro build of these Spark releases (2026-11-24: the newest is 4.1.1, and there is none
# of 4.1.2, 4.1.3 or 4.2.0), so the newest one published stands in; the whole suite runs from_avro/to_avro on it.
# Remove an entry when spark-avro of that version appears, and the set then takes the exact version again.
SPARK_AVRO_STAND_IN = {"4.2.0": "4.1.1"}


def spark_versions() -> tuple[str, str]:
    """(pyspark, delta-spark) as installed: the jars must match them exactly (pinned in pyproject.toml)."""
    try:
        return importlib.metadata.version("pyspark"), importlib.metadata.version("delta-spark")
    except importlib.metadata.PackageNotFoundError as exc:
        raise ArtifactResolutionError(f"{exc.name} is not installed; run `pip install -e .`") from exc


def check_engine_pair(spark_version: str, delta_version: str) -> None:
    """Raise EngineVersionError when the installed delta-spark was not built for the installed pyspark.

    The range is the one delta-spark's own package declares (``Requires-Dist: pyspark...``), so a pair that pip
    would refuse (one package upgraded by hand, say) fails here by name instead of as a ClassNotFoundException.
    """
    from packaging.requirements import Requirement

    for line in importlib.metadata.requires("delta-spark") or []:
        requirement = Requirement(line)
        if requirement.name == "pyspark" and not requirement.specifier.contains(spark_version, prereleases=True):
            raise EngineVersionError(
                f"delta-spark {delta_version} is built for pyspark{requirement.specifier}, but pyspark "
                f"{spark_version} is installed: install the pair pinned in pyproject.toml (`pip install -e .`)"
            )


def delta_artifact(spark_version: str, delta_version: str) -> str:
    """Delta's Maven artifact for this Spark: ``delta-spark_<spark major.minor>_2.13`` from Delta 4.1 on (the
    unsuffixed ``delta-spark_2.13`` is built for Delta's default Spark only)."""
    if Version(delta_version) < Version("4.1"):
        return f"delta-spark_{SCALA_BINARY_VERSION}"
    spark_minor = ".".join(spark_version.split(".")[:2])
    return f"delta-spark_{spark_minor}_{SCALA_BINARY_VERSION}"


def spark_avro_version(spark_version: str) -> str:
    return SPARK_AVRO_STAND_IN.get(spark_version, spark_version)


def spark_artifacts() -> ArtifactSet:
    """Delta, the Kafka source and Avro for the installed Spark, minus what pyspark's own jars/ provide."""
    spark_version, delta_version = spark_versions()
    check_engine_pair(spark_version, delta_version)
    return ArtifactSet(
        name=f"spark-{spark_version}-delta-{delta_version}",
        coordinates=(
            ("io.delta", delta_artifact(spark_version, delta_version), delta_version),
            ("org.apache.spark", f"spark-sql-kafka-0-10_{SCALA_BINARY_VERSION}", spark_version),
            ("org.apache.spark", f"spark-avro_{SCALA_BINARY_VERSION}", spark_avro_version(spark_version)),
        ),
        provided_modules=tuple(sorted(pyspark_jar_modules())),
    )


_JAR_NAME = re.compile(r"^(?P<module>.+?)-(?P<version>\d[^/]*)\.jar$")


def pyspark_home() -> Path:
    """The installed pyspark package directory (it has bin/ and jars/)."""
    spec = importlib.util.find_spec("pyspark")
    if spec is None or not spec.submodule_search_locations:
        raise ArtifactResolutionError("pyspark is not installed; run `pip install -e .`")
    return Path(next(iter(spec.submodule_search_locations)))


def pyspark_jar_modules() -> set[str]:
    """Artifact names (without version) of the jars pyspark ships: on every Spark classpath already."""
    modules = set()
    for jar in (pyspark_home() / "jars").glob("*.jar"):
        match = _JAR_NAME.match(jar.name)
        if match:
            modules.add(match.group("module"))
    return modules


def cache_root() -> Path:
    return settings.cache_root()


def set_dir(artifacts: ArtifactSet) -> Path:
    return cache_root() / "jars" / f"{artifacts.name}-{artifacts.fingerprint}"


def repository_url() -> str:
    url = settings.maven_repository() or MAVEN_CENTRAL
    return url if url.endswith("/") else url + "/"


def find_ivy_jar() -> Path:
    """$STREAMING_PIPELINE_IVY_JAR, else the ivy-*.jar in pyspark's jars/ folder."""
    override = settings.ivy_jar_override()
    if override:
        return override
    found = sorted((pyspark_home() / "jars").glob("ivy-*.jar"))
    if not found:
        raise ArtifactResolutionError(
            f"no Apache Ivy jar in {pyspark_home() / 'jars'}; reinstall pyspark or set ${IVY_JAR_ENV}"
        )
    return found[-1]


def _stderr_progress(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def is_valid_jar(path: Path) -> bool:
    """A jar that exists and whose zip directory is readable (a truncated download is not)."""
    try:
        if not path.is_file() or path.stat().st_size == 0:
            return False
        with zipfile.ZipFile(path) as archive:
            return bool(archive.namelist())
    except (OSError, zipfile.BadZipFile):
        return False


def cached_classpath(artifacts: ArtifactSet) -> list[Path] | None:
    """The resolved classpath when every listed jar is present and valid; None means resolve again."""
    try:
        entries = [line.strip() for line in (set_dir(artifacts) / "classpath.txt").read_text().splitlines()]
    except OSError:
        return None
    jars = [Path(entry) for entry in entries if entry]
    if not jars or not all(is_valid_jar(jar) for jar in jars):
        return None
    return jars


def _ivy_settings(ivy_cache: Path, repository: str) -> str:
    return f"""<?xml version="1.0" encoding="UTF-8"?>
<!-- Generated by streaming_pipeline.lakehouse.engine.jars: one repository, a private cache, no local repositories.
     The sets share the cache: each download holds a lock (java.nio), so sets resolve side by side. -->
<ivysettings>
  <settings defaultResolver="repository"/>
  <caches defaultCacheDir={quoteattr(str(ivy_cache))} useOrigin="false" lockStrategy="artifact-lock-nio"/>
  <resolvers>
    <ibiblio name="repository" m2compatible="true" root={quoteattr(repository)}/>
  </resolvers>
</ivysettings>
"""


def _ivy_module(artifacts: ArtifactSet) -> str:
    dependencies = "\n".join(
        f'    <dependency org="{escape(g)}" name="{escape(a)}" rev="{escape(v)}" conf="default->default"/>'
        for g, a, v in artifacts.coordinates
    )
    excludes = "\n".join(f"    <exclude module={quoteattr(module)}/>" for module in artifacts.provided_modules)
    return f"""<?xml version="1.0" encoding="UTF-8"?>
<!-- Generated by streaming_pipeline.lakehouse.engine.jars: the {escape(artifacts.name)} artifact set. -->
<ivy-module version="2.0">
  <info organisation="streaming-pipeline" module={quoteattr(artifacts.name)} revision="1"/>
  <configurations>
    <conf name="default"/>
  </configurations>
  <dependencies>
{dependencies}
{excludes}
  </dependencies>
</ivy-module>
"""


_FAILURE_LINE = re.compile(r"(download failed: \S+|:: \S+#\S+;\S+: .+|module not found: \S+)")


def _run_ivy(command: list[str], log_file: Path, artifacts: ArtifactSet, say: Progress) -> None:
    """Run Ivy, reporting as it goes; raise naming the artifacts that failed.

    On a terminal a bar with the modules found so far and a running clock (when `say` is the default, stderr), or
    a line through `say` every few seconds, also while Ivy is silent (a large download); into a pipe or a log
    nothing. The outcome is reported by the caller.
    """
    downloaded = 0
    lines: list[str] = []
    try:
        process = subprocess.Popen(
            command, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
        )
    except OSError as exc:
        raise ArtifactResolutionError(f"could not run Java for Apache Ivy ({command[0]}): {exc}") from exc
    assert process.stdout is not None
    deadline = time.monotonic() + RESOLVE_TIMEOUT_SECONDS
    with ProgressReport(
        None,
        f"  {artifacts.name}",
        "modules",
        say=say,
        bar=say is _stderr_progress,
        leave=False,
        rate=False,
        heartbeat=True,
    ) as report:
        for line in process.stdout:
            lines.append(line.rstrip("\n"))
            stripped = line.strip()
            if stripped.startswith("found "):
                report.update(1)
            elif stripped.startswith("[SUCCESSFUL ]"):
                downloaded += 1
                report.set_status(f"{downloaded} files downloaded")
            if time.monotonic() > deadline:
                process.kill()
                break
    code = process.wait()
    log_file.write_text("$ " + " ".join(command) + "\n" + "\n".join(lines) + "\n")
    if code != 0:
        failures = sorted({m.group(1) for line in lines if (m := _FAILURE_LINE.search(line))})
        detail = "; ".join(failures[:6]) or "\n".join(lines[-10:])
        raise ArtifactResolutionError(
            f"could not resolve the {artifacts.name} jars from {repository_url()} (Apache Ivy exit code {code}): "
            f"{detail}. Check that this machine reaches that repository (or set ${REPOSITORY_ENV} to a Maven "
            f"mirror), then run `streaming-pipeline jars fetch` again. Full log: {log_file}"
        )


def _retrieved_jars(artifacts: ArtifactSet, ivy_cache: Path, lib: Path) -> list[Path]:
    """The jars Ivy's resolution report lists for the set, each of which must have been retrieved."""
    report = ivy_cache / f"streaming-pipeline-{artifacts.name}-default.xml"
    try:
        root = ET.parse(report).getroot()
    except (OSError, ET.ParseError) as exc:
        raise ArtifactResolutionError(f"Apache Ivy wrote no readable resolution report ({report}): {exc}") from exc
    expected: list[Path] = []
    missing: list[str] = []
    modules: list[tuple[str, str]] = []
    for module in root.iter("module"):
        for revision in module.iter("revision"):
            if revision.get("evicted"):
                continue
            for artifact in revision.iter("artifact"):
                if artifact.get("ext") != "jar":
                    continue
                classifier = artifact.get("extra-classifier")
                name = f"{module.get('organisation')}__{artifact.get('name')}-{revision.get('name')}"
                jar = lib / (name + (f"-{classifier}" if classifier else "") + ".jar")
                expected.append(jar)
                if artifact.get("status") == "failed" or not is_valid_jar(jar):
                    missing.append(f"{module.get('organisation')}:{module.get('name')}:{revision.get('name')}")
                    modules.append((str(module.get("organisation")), str(module.get("name"))))
    if missing:
        raise IncompleteResolution(
            f"the {artifacts.name} jars are incomplete: no valid jar for {', '.join(missing[:6])} "
            f"(from {repository_url()}); run `streaming-pipeline jars fetch --force`",
            modules,
        )
    if not expected:
        raise ArtifactResolutionError(f"Apache Ivy resolved no jars for {artifacts.name}; see {report}")
    return sorted(expected)


def resolve(artifacts: ArtifactSet, *, force: bool = False, progress: Progress | None = _stderr_progress) -> list[Path]:
    """The jars of `artifacts`, from the project cache, resolving them first when they are not all there.

    Raises ArtifactResolutionError naming the artifact, the repository and what to do.
    """
    say = progress or (lambda _message: None)
    if not force and (cached := cached_classpath(artifacts)) is not None:
        return cached
    directory = set_dir(artifacts)
    with exclusive_lock(directory / ".lock"):  # processes starting together resolve once
        if not force and (cached := cached_classpath(artifacts)) is not None:
            return cached  # another process resolved while we waited for the lock
        java = find_java()
        ivy_jar = find_ivy_jar()
        ivy_cache = cache_root() / "jars" / "ivy-cache"
        (directory / "ivysettings.xml").write_text(_ivy_settings(ivy_cache, repository_url()))
        (directory / "ivy.xml").write_text(_ivy_module(artifacts))
        (directory / "classpath.txt").unlink(missing_ok=True)
        lib = directory / "lib"
        say(f"Resolving the {artifacts.name} jars from {repository_url()} into {directory} (first time only)...")
        started = time.monotonic()
        command = [
            str(java),
            f"-Divy.default.ivy.user.dir={cache_root() / 'jars' / 'ivy-home'}",
            "-jar",
            str(ivy_jar),
            "-settings",
            str(directory / "ivysettings.xml"),
            "-ivy",
            str(directory / "ivy.xml"),
            "-confs",
            "default",
            "-retrieve",
            str(lib / "[organisation]__[artifact]-[revision](-[classifier]).[ext]"),
            "-sync",
        ]
        for attempt in (1, 2):
            shutil.rmtree(lib, ignore_errors=True)  # Ivy's retrieve would keep a damaged copy
            _run_ivy(command, directory / "resolve.log", artifacts, say)
            try:
                jars = _retrieved_jars(artifacts, ivy_cache, lib)
                break
            except IncompleteResolution as incomplete:
                if attempt == 2:
                    raise
                # A damaged download in Ivy's own cache: forget those modules and fetch them again.
                for organisation, module in incomplete.modules:
                    shutil.rmtree(ivy_cache / organisation / module, ignore_errors=True)
        tmp = directory / "classpath.txt.tmp"
        tmp.write_text("".join(f"{jar}\n" for jar in jars))
        tmp.replace(directory / "classpath.txt")
        size_mb = sum(jar.stat().st_size for jar in jars) / 1e6
        say(f"Resolved {len(jars)} jars ({size_mb:.0f} MB) for {artifacts.name} in {time.monotonic() - started:.0f} s")
        return jars


def broker_classpath(*, progress: Progress | None = _stderr_progress) -> list[Path]:
    return resolve(kafka_broker_artifacts(), progress=progress)


def spark_jars(*, progress: Progress | None = _stderr_progress) -> list[Path]:
    """The jars every Spark JVM of the project starts with (`spark.jars` / `--jars`)."""
    return resolve(spark_artifacts(), progress=progress)


def object_store_classpath(*, progress: Progress | None = _stderr_progress) -> list[Path]:
    return resolve(object_store_artifacts(), progress=progress)


def s3a_jars(*, progress: Progress | None = _stderr_progress) -> list[Path]:
    """The jars a Spark JVM adds for tables and checkpoints on `s3a://`."""
    return resolve(s3a_artifacts(), progress=progress)


def metastore_jdbc_jars(*, progress: Progress | None = _stderr_progress) -> list[Path]:
    """The jars on the driver's classpath of an engine whose metastore is in PostgreSQL."""
    return resolve(metastore_jdbc_artifacts(), progress=progress)


def artifact_sets() -> dict[str, ArtifactSet]:
    return {
        "kafka": kafka_broker_artifacts(),
        "spark": spark_artifacts(),
        "object-store": object_store_artifacts(),
        "s3a": s3a_artifacts(),
        "metastore-jdbc": metastore_jdbc_artifacts(),
    }
