"""Spark sessions: a Spark Connect client when SPARK_REMOTE is set, else an in-process local session.

The warm engine is a Spark Connect server (`streaming-pipeline stack up` starts one and `stack env`
exports SPARK_REMOTE=sc://host:port); a run then connects in well under a second instead of starting a
JVM. Without SPARK_REMOTE (unit tests, a laptop without the stack) the resource starts a classic session
from a `spark_conf/` profile, with the project's jars given explicitly: nothing resolves at session start.
"""

from __future__ import annotations

import atexit
import weakref
from importlib import resources
from importlib.resources.abc import Traversable
from typing import TYPE_CHECKING, Any

from streaming_pipeline.lakehouse import settings
from streaming_pipeline.lakehouse.errors import (
    ConfigurationError,
    EngineVersionError,
    SparkUnavailableError,
    first_line,
)

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

PROFILES = ("local", "cluster")
SESSION_TIME_ZONE = "UTC"


def spark_conf_dir() -> Traversable:
    """$STREAMING_PIPELINE_SPARK_CONF_DIR, else the profiles of the top-level `spark_conf/` folder, shipped inside the
    package (`streaming_pipeline/lakehouse/spark_profiles`) and read with importlib.resources."""
    return settings.spark_conf_dir_override() or resources.files("streaming_pipeline.lakehouse") / "spark_profiles"


def read_profile(profile: str) -> dict[str, str]:
    """Settings of `spark_conf/<profile>.conf` (spark-defaults.conf format)."""
    if profile not in PROFILES:
        raise ConfigurationError(f"Spark profile {profile!r} is unknown; choose one of {', '.join(PROFILES)}")
    path = spark_conf_dir() / f"{profile}.conf"
    if not path.is_file():
        raise ConfigurationError(f"Spark profile file not found: {path}")
    conf: dict[str, str] = {}
    for number, line in enumerate(path.read_text().splitlines(), start=1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        parts = line.split(None, 1)
        if len(parts) != 2:
            raise ConfigurationError(f"{path}:{number}: expected 'key value', got {line!r}")
        conf[parts[0]] = parts[1].strip()
    return conf


S3A_PREFIX = "spark.hadoop.fs.s3a."


def s3a_conf(endpoint_url: str, region: str) -> dict[str, str]:
    """Hadoop S3A's settings for an S3-compatible store at `endpoint_url`: path-style requests (a bucket is not a
    host name), its region, TLS as the URL says. The keys are not among them: S3A reads AWS_ACCESS_KEY_ID and
    AWS_SECRET_ACCESS_KEY from the JVM's environment, so that no secret is on a command line or in Spark's UI."""
    return {
        f"{S3A_PREFIX}endpoint": endpoint_url,
        f"{S3A_PREFIX}endpoint.region": region,
        f"{S3A_PREFIX}path.style.access": "true",
        f"{S3A_PREFIX}connection.ssl.enabled": str(endpoint_url.startswith("https://")).lower(),
        # Uploads buffer in memory, not in local temporary files: S3A's local buffer asks Hadoop for a checksummed
        # LocalFileSystem, which the profiles' RawLocalFileSystem for `file:` is not (a ClassCastException).
        f"{S3A_PREFIX}fast.upload.buffer": "bytebuffer",
        # A store that is away fails a request within seconds, not after S3A's default of 10 retries with back-off.
        f"{S3A_PREFIX}attempts.maximum": "3",
        f"{S3A_PREFIX}retry.limit": "3",
    }


def lakehouse_s3a_conf(lakehouse_dir: str) -> dict[str, str]:
    """S3A's settings for an in-process driver whose lakehouse is on `s3a://`, and so its connector (`engine_conf`):
    the store AWS_ENDPOINT_URL names (`s3a_conf`), or else AWS S3 in AWS_REGION; nothing for another lakehouse."""
    if not lakehouse_dir.startswith("s3a://"):
        return {}
    endpoint_url, region = settings.s3_client_settings()
    if endpoint_url:
        return s3a_conf(endpoint_url, region or "us-east-1")
    if region:
        return {f"{S3A_PREFIX}endpoint.region": region}
    return {f"{S3A_PREFIX}impl": "org.apache.hadoop.fs.s3a.S3AFileSystem"}  # Hadoop's default: the region from the SDK


def engine_conf(profile: str, master: str | None = None, extra: dict[str, str] | None = None) -> dict[str, str]:
    """The settings a Spark driver of this project starts with: the profile, the master, the project's jars.

    With a JDK at hand they include Delta's log store for local disks whose listing does not grow with the log
    (engine/log_store.py), unless the profile or `extra` name a store for `file:` of their own. Settings of S3A
    (`spark.hadoop.fs.s3a.*`, from `s3a_conf`) bring Hadoop's S3A connector onto the classpath.
    """
    from streaming_pipeline.lakehouse.engine.jars import pyspark_home, s3a_jars, spark_jars
    from streaming_pipeline.lakehouse.engine.log_store import LOG_STORE_CLASS, LOG_STORE_CONF, log_store_jar

    conf = read_profile(profile)
    if master:
        conf["spark.master"] = master
    if "spark.master" not in conf:
        raise ConfigurationError(f"Spark profile {profile!r} has no master: set SPARK_MASTER (e.g. spark://host:7077)")
    jars = spark_jars()
    conf["spark.jars"] = ",".join(str(jar) for jar in jars)
    conf.update(extra or {})
    if any(key.startswith(S3A_PREFIX) for key in conf):
        conf["spark.jars"] += "".join(f",{jar}" for jar in s3a_jars())
    if LOG_STORE_CONF not in conf and (store_jar := log_store_jar(jars, pyspark_home() / "jars")) is not None:
        conf["spark.jars"] += f",{store_jar}"
        conf[LOG_STORE_CONF] = LOG_STORE_CLASS
    return conf


def validate_remote(url: str) -> str:
    if not url.startswith("sc://"):
        raise ConfigurationError(f"SPARK_REMOTE={url!r} is not a Spark Connect URL; expected sc://host:port")
    return url


def connect_session(url: str) -> SparkSession:
    """A new Spark Connect session to `url`; from then on this process is a Spark Connect client.

    pyspark lets a process be a Connect client or a classic driver, not both: its functions (F.col, ...) build
    Connect expressions once SPARK_CONNECT_MODE_ENABLED is set, as its own builder does. `create`, because
    `getOrCreate` could hand back a session bound to another server.
    """
    from pyspark.sql.connect.session import SparkSession as RemoteSparkSession

    settings.become_spark_connect_client()
    session = RemoteSparkSession.builder.remote(url).create()
    # pyspark 4.2's client sends one more command when the interpreter exits (a cleanup of Spark ML's cache) and,
    # when the server is gone by then (a stack stopped first, a server that died), retries it for about ten
    # minutes. This project uses no Spark ML: close the channel at exit instead, which sends nothing. (Registered
    # after the client's own hook, so it runs first; the session itself is released by `stop()` or expires.)
    atexit.register(_close_channel_at_exit, weakref.ref(session.client))
    return session  # type: ignore[return-value]


def _close_channel_at_exit(client_ref: weakref.ref[Any]) -> None:
    client = client_ref()
    if client is not None and not client.is_closed:
        client.close()


def session_url(url: str, session_id: str) -> str:
    """The Spark Connect URL `url` (its parameters kept) naming session `session_id`."""
    base = url.rstrip("/")
    return f"{base};session_id={session_id}" if "/;" in base else f"{base}/;session_id={session_id}"


def stop_session_queries(url: str, session_id: str) -> list[str]:
    """Stop the streaming queries of Spark Connect session `session_id` and release the session; their names.

    The queries a client started run on in the server when the client's process dies (until the session expires,
    `spark.connect.session.manager.defaultSessionTimeout`): attached to that session, another client can stop them.
    Nothing when the session is closed or expired, or the server does not answer. The attached session is always
    stopped: pyspark makes a new session the process's active one when it has none yet, and a closed session left
    active fails what uses the active session later (Python UDFs, local data) with INVALID_HANDLE.SESSION_CLOSED."""
    from pyspark.errors import PySparkException

    stopped: list[str] = []
    session = None
    try:
        session = connect_session(session_url(url, session_id))
        for query in session.streams.active:
            query.stop()
            stopped.append(query.name or str(query.id))
    except (PySparkException, OSError):
        pass
    finally:
        if session is not None:
            session.stop()  # best effort in pyspark: never raises; forgets the session as the active one
    return stopped


def check_server_version(url: str, server_version: str) -> None:
    """Raise EngineVersionError unless the Connect server runs the Spark version of this client's pyspark.

    The server runs the project's foreachBatch handlers in its own Python workers and loads the project's Delta,
    Kafka and Avro jars, all resolved for one Spark version; a server of another version (one started from an
    older install and left running, another image) fails later and far less clearly.
    """
    from pyspark import __version__ as client_version

    if server_version != client_version:
        raise EngineVersionError(
            f"the Spark Connect server at {url} runs Spark {server_version}, but this client is pyspark "
            f"{client_version}: start a server of Spark {client_version} (`streaming-pipeline stack down` and "
            f"`stack up` with this installation), or install pyspark {server_version} with its Delta pair"
        )


def open_remote_session(url: str, conf: dict[str, str] | None = None) -> SparkSession:
    """A Spark Connect session to `url` whose server runs this client's Spark version, in UTC, with `conf` set."""
    from pyspark.errors import PySparkException

    url = validate_remote(url)
    try:
        session = connect_session(url)
        server_version = session.version
    except (PySparkException, OSError) as exc:
        raise SparkUnavailableError(
            f"the Spark Connect server at {url} (SPARK_REMOTE) did not answer: {first_line(exc)}. "
            "Start it with `streaming-pipeline stack up`, or unset SPARK_REMOTE to run Spark in-process."
        ) from exc
    try:
        check_server_version(url, server_version)
    except EngineVersionError:
        session.stop()
        raise
    try:
        session.conf.set("spark.sql.session.timeZone", SESSION_TIME_ZONE)
        for key, value in (conf or {}).items():
            session.conf.set(key, value)
    except (PySparkException, OSError) as exc:
        raise SparkUnavailableError(f"the Spark Connect server at {url} refused a setting: {first_line(exc)}") from exc
    return session


def start_local_session(conf: dict[str, str]) -> SparkSession:
    """An in-process Spark driver started with `conf` (see `engine_conf`), mapping the class-data archive
    (engine/class_data.py) when there is one."""
    from pyspark.errors import PySparkRuntimeError
    from pyspark.sql import SparkSession

    from streaming_pipeline.lakehouse.engine.class_data import with_java_options

    if settings.is_spark_connect_client():
        raise SparkUnavailableError(
            "this process is already a Spark Connect client, and pyspark cannot also start an in-process Spark "
            "session in it: set SPARK_REMOTE (sc://host:port) for every session, or use another process"
        )
    builder = SparkSession.builder.appName("streaming-pipeline")
    for key, value in with_java_options(conf).items():
        builder = builder.config(key, value)
    try:
        session = builder.getOrCreate()
    except PySparkRuntimeError as exc:
        raise SparkUnavailableError(
            f"the local Spark driver JVM did not start ({first_line(exc)}). Check `java -version` (17+) "
            "and JAVA_HOME; the JVM's own messages are printed above."
        ) from exc
    session.sparkContext.setLogLevel("WARN")
    return session
