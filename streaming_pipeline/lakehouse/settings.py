"""Every environment variable the project reads, read here and nowhere else (docs/configuration.md lists them).

Every variable is optional; the defaults work with the embedded stack started by `streaming-pipeline stack up` in
the current directory. A value that cannot be used is a ConfigurationError naming the variable and the value. A
secret is never read into a value here: `secret_is_set` only says whether it is set, and the code location passes
it to its resource as a `dagster.EnvVar`, so it is resolved when a run starts and never printed or logged.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from streaming_pipeline.lakehouse.errors import ConfigurationError

DEFAULT_BOOTSTRAP_SERVERS = "127.0.0.1:9092"
DEFAULT_SCHEMA_REGISTRY_URL = "http://127.0.0.1:8081"
DEFAULT_LAKEHOUSE_DIR = ".lakehouse"
DEFAULT_MAX_OFFSETS_PER_TRIGGER = 1_000_000
DEFAULT_SPARK_PROFILE = "local"

_INTERVAL = re.compile(r"^\s*(\d+)\s+([a-z]+?)s?\s*$", re.IGNORECASE)
_UNIT_SECONDS = {"second": 1, "minute": 60, "hour": 3600, "day": 86400}


def _interval(text: str, *, name: str, units: tuple[str, ...], example: str) -> tuple[int, str]:
    """(count, unit) of a Spark-style interval such as '10 minutes' whose unit is one of `units`, naming the setting
    on error."""
    match = _INTERVAL.match(text)
    unit = match.group(2).lower() if match else ""
    if not match or unit not in units or int(match.group(1)) <= 0:
        raise ConfigurationError(
            f"{name}={text!r} is not a positive interval; use a number and one of "
            f"{', '.join(f'{u}(s)' for u in units)}, e.g. '{example}'"
        )
    return int(match.group(1)), unit


def interval_seconds(text: str, *, name: str) -> int:
    """Parse a Spark-style interval such as '10 minutes' into seconds, naming the setting on error."""
    count, unit = _interval(text, name=name, units=tuple(_UNIT_SECONDS), example="10 minutes")
    return count * _UNIT_SECONDS[unit]


def normalize_interval(text: str, *, name: str) -> str:
    """Return the interval as Spark expects it ('600 seconds'), after validating it."""
    return f"{interval_seconds(text, name=name)} seconds"


def _environ(environ: Mapping[str, str] | None) -> Mapping[str, str]:
    return os.environ if environ is None else environ


def _lakehouse_dir(value: str) -> str:
    """A URI (s3a://..., file:/...) as it is; a plain path made absolute here. Spark resolves a relative path
    against the working directory of its driver (a Spark Connect server runs in a directory of its own), and the
    sensors and checks read the same path in this process: only an absolute path means the same place to both."""
    if "://" in value or value.startswith("file:"):
        return value
    return str(Path(value).expanduser().resolve())


def _positive_int(env: Mapping[str, str], name: str, default: int) -> int:
    text = env.get(name)
    if not text:
        return default
    if not text.isdigit() or int(text) <= 0:
        raise ConfigurationError(f"{name}={text!r} is not a positive whole number")
    return int(text)


def _number(env: Mapping[str, str], name: str, default: float | None) -> float | None:
    text = env.get(name)
    if not text:
        return default
    try:
        return float(text)
    except ValueError:
        raise ConfigurationError(f"{name}={text!r} is not a number (e.g. 40 or 39.5)") from None


def _positive_float(env: Mapping[str, str], name: str, default: float) -> float:
    text = env.get(name)
    if not text:
        return default
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if value <= 0:
        raise ConfigurationError(f"{name}={text!r} is not a positive number")
    return value


def _existing_file(env: Mapping[str, str], name: str) -> str | None:
    """A configured file, made absolute; one that does not exist fails here, naming the variable, rather than
    later inside a Spark job."""
    configured = env.get(name)
    if not configured:
        return None
    path = Path(configured).expanduser().resolve()
    if not path.is_file():
        raise ConfigurationError(f"{name}={configured!r}: no such file ({path})")
    return str(path)


def _interval_text(env: Mapping[str, str], name: str) -> str | None:
    """A Spark interval, kept as written once it is checked."""
    text = env.get(name)
    if not text:
        return None
    interval_seconds(text, name=name)
    return text


#: How the environment variable of an asset's parameter is read, by the parameter's kind; a value that cannot be
#: used is a ConfigurationError naming the variable.
_PARAMETER_READERS = {
    "number": lambda env, name: _number(env, name, None),
    "interval": _interval_text,
    "file": _existing_file,
    "text": lambda env, name: env.get(name) or None,
}
PARAMETER_KINDS = tuple(_PARAMETER_READERS)


def read_parameter(kind: str, name: str, environ: Mapping[str, str] | None = None) -> object | None:
    """The value the environment variable `name` gives an asset's parameter of `kind`.

    Args:
        kind: How to read it: 'number' (a float), 'interval' (a Spark interval such as '10 minutes', kept as
            written), 'file' (an existing file, made absolute) or 'text' (as written, for a SQL parameter).
        name: The variable.
        environ: Where to read it (the process's environment when None).

    Returns:
        The value, or None when the variable is unset or empty.
    """
    return _PARAMETER_READERS[kind](_environ(environ), name)


@dataclass(frozen=True)
class SensorSettings:
    """When the offset sensors request a run (environment variables `OFFSET_SENSOR_*`)."""

    interval_seconds: int = 2
    min_records: int = 1
    max_wait_seconds: float = 30.0
    retry_backoff_seconds: float = 5.0
    max_backoff_seconds: float = 300.0
    lag_report_seconds: float = 60.0

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> SensorSettings:
        env = _environ(environ)
        defaults = cls()
        return cls(
            interval_seconds=_positive_int(env, "OFFSET_SENSOR_INTERVAL_SECONDS", defaults.interval_seconds),
            min_records=_positive_int(env, "OFFSET_SENSOR_MIN_RECORDS", defaults.min_records),
            max_wait_seconds=_positive_float(env, "OFFSET_SENSOR_MAX_WAIT_SECONDS", defaults.max_wait_seconds),
            retry_backoff_seconds=_positive_float(
                env, "OFFSET_SENSOR_RETRY_BACKOFF_SECONDS", defaults.retry_backoff_seconds
            ),
            max_backoff_seconds=_positive_float(env, "OFFSET_SENSOR_MAX_BACKOFF_SECONDS", defaults.max_backoff_seconds),
            lag_report_seconds=_positive_float(env, "OFFSET_SENSOR_LAG_REPORT_SECONDS", defaults.lag_report_seconds),
        )


LIVE_MODES = ("triggered", "continuous")


@dataclass(frozen=True)
class LiveSettings:
    """How the live path streams (docs/live-mode.md): `LIVE_MODE` is `triggered` (offset sensors start a run when
    records wait) or `continuous` (one long-running run keeps every query streaming). In continuous mode the run
    reports each table at most every `CONTINUOUS_REPORT_SECONDS`, and stops the window query for its reconcile at
    most every `CONTINUOUS_RECONCILE_SECONDS`. The queries of the tables a user waits for (the latency-critical
    steps and the bronze tables they read) trigger every `CONTINUOUS_TRIGGER_INTERVAL`, the others every
    `CONTINUOUS_DOWNSTREAM_TRIGGER_INTERVAL`. A streamed table is late (its freshness policy fails) when it has not
    been reported for `CONTINUOUS_FRESHNESS_SECONDS`, and warns after half of that. The streaming tables' asset
    checks run while they stream on `CONTINUOUS_CHECKS_CRON` (UTC; the schedule runs by default in the continuous
    mode)."""

    mode: str = "triggered"
    trigger_interval: str = "500 milliseconds"
    downstream_trigger_interval: str = "2 minutes"
    report_seconds: float = 30.0
    reconcile_seconds: float = 300.0
    freshness_seconds: float = 300.0
    checks_cron: str = "0 * * * *"

    @property
    def continuous(self) -> bool:
        return self.mode == "continuous"

    @property
    def caught_up_report_seconds(self) -> float:
        """How often the run reports a table that is caught up with its sources but got no new rows: well inside the
        freshness policy's warning window (half of `freshness_seconds`), so that an idle table is never late."""
        return self.freshness_seconds / 5

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> LiveSettings:
        env = _environ(environ)
        defaults = cls()
        mode = (env.get("LIVE_MODE") or defaults.mode).strip().lower()
        if mode not in LIVE_MODES:
            raise ConfigurationError(f"LIVE_MODE={env.get('LIVE_MODE')!r} is not one of {', '.join(LIVE_MODES)}")
        interval = env.get("CONTINUOUS_TRIGGER_INTERVAL") or defaults.trigger_interval
        downstream = env.get("CONTINUOUS_DOWNSTREAM_TRIGGER_INTERVAL") or defaults.downstream_trigger_interval
        return cls(
            mode=mode,
            trigger_interval=trigger_interval(interval, name="CONTINUOUS_TRIGGER_INTERVAL"),
            downstream_trigger_interval=trigger_interval(downstream, name="CONTINUOUS_DOWNSTREAM_TRIGGER_INTERVAL"),
            report_seconds=_positive_float(env, "CONTINUOUS_REPORT_SECONDS", defaults.report_seconds),
            reconcile_seconds=_positive_float(env, "CONTINUOUS_RECONCILE_SECONDS", defaults.reconcile_seconds),
            freshness_seconds=_freshness_seconds(env, defaults.freshness_seconds),
            checks_cron=_cron(env, "CONTINUOUS_CHECKS_CRON", defaults.checks_cron),
        )


def _freshness_seconds(env: Mapping[str, str], default: float) -> float:
    """CONTINUOUS_FRESHNESS_SECONDS: at least 2 minutes, since Dagster's freshness windows (the warning after half)
    are at least a minute each."""
    seconds = _positive_float(env, "CONTINUOUS_FRESHNESS_SECONDS", default)
    if seconds < 120:
        raise ConfigurationError(
            f"CONTINUOUS_FRESHNESS_SECONDS={env.get('CONTINUOUS_FRESHNESS_SECONDS')!r} is shorter than 120: Dagster's "
            "freshness policies warn and fail after at least a minute each (the warning comes after half)"
        )
    return seconds


def trigger_interval(text: str, *, name: str) -> str:
    """A processing-time trigger's interval as Spark takes it ('500 milliseconds'), naming the setting on error."""
    count, unit = _interval(text, name=name, units=("millisecond", "second", "minute"), example="500 milliseconds")
    return f"{count} {unit}s"


@dataclass(frozen=True)
class RunRetentionSettings:
    """How long Dagster keeps the finished runs that sensors and schedules launched, with their event logs
    (`DAGSTER_RUN_RETENTION_DAYS`, `DAGSTER_FAILED_RUN_RETENTION_DAYS`; docs/dagster-storage.md)."""

    run_retention_days: int = 7
    failed_run_retention_days: int = 30

    def __post_init__(self) -> None:
        for name, value in (
            ("run_retention_days", self.run_retention_days),
            ("failed_run_retention_days", self.failed_run_retention_days),
        ):
            if value <= 0:
                raise ConfigurationError(f"{name}={value!r} is not a positive whole number of days")
        if self.failed_run_retention_days < self.run_retention_days:
            raise ConfigurationError(
                f"failed_run_retention_days={self.failed_run_retention_days} is shorter than "
                f"run_retention_days={self.run_retention_days}: failed runs are kept at least as long as the others"
            )

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> RunRetentionSettings:
        env = _environ(environ)
        defaults = cls()
        days = _positive_int(env, "DAGSTER_RUN_RETENTION_DAYS", defaults.run_retention_days)
        # Unset, the failures' retention follows a longer one for the others.
        failed_days = _positive_int(
            env, "DAGSTER_FAILED_RUN_RETENTION_DAYS", max(defaults.failed_run_retention_days, days)
        )
        if failed_days < days:
            raise ConfigurationError(
                f"DAGSTER_FAILED_RUN_RETENTION_DAYS={env.get('DAGSTER_FAILED_RUN_RETENTION_DAYS')!r} is shorter than "
                f"DAGSTER_RUN_RETENTION_DAYS={days}: failed runs are kept at least as long as the others"
            )
        return cls(run_retention_days=days, failed_run_retention_days=failed_days)


@dataclass(frozen=True)
class KafkaSecurity:
    """How clients authenticate to Kafka. The SASL username and password are secrets: only whether they are set.
    The TLS files are paths (made absolute, checked to exist): the CA that signed the brokers' certificates, and
    for mutual TLS one PEM file with the client's private key and its certificate chain."""

    security_protocol: str = "PLAINTEXT"
    sasl_mechanism: str | None = None
    sasl_username_set: bool = False
    sasl_password_set: bool = False
    ssl_ca_location: str | None = None
    ssl_keystore_location: str | None = None


@dataclass(frozen=True)
class RegistrySecurity:
    """How clients reach a schema registry over HTTPS with basic auth: whether the 'user:password' secret is set,
    the CA file for its certificate, and for mutual TLS one PEM file with the client's key and certificate chain."""

    basic_auth_set: bool = False
    ssl_ca_location: str | None = None
    ssl_keystore_location: str | None = None


@dataclass(frozen=True)
class PipelineSettings:
    """Where the external systems are and how to reach them. The assets' own parameters are read by
    `read_parameter`, from the environment variables their config fields declare."""

    bootstrap_servers: str
    schema_registry_url: str
    lakehouse_dir: str
    spark_master: str | None
    spark_remote: str | None
    max_offsets_per_trigger: int = DEFAULT_MAX_OFFSETS_PER_TRIGGER
    spark_profile: str = DEFAULT_SPARK_PROFILE
    kafka_security: KafkaSecurity = field(default_factory=KafkaSecurity)
    registry_security: RegistrySecurity = field(default_factory=RegistrySecurity)

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> PipelineSettings:
        env = _environ(environ)
        spark_master = env.get("SPARK_MASTER") or None
        settings = cls(
            bootstrap_servers=env.get("KAFKA_BOOTSTRAP_SERVERS") or DEFAULT_BOOTSTRAP_SERVERS,
            schema_registry_url=env.get("SCHEMA_REGISTRY_URL") or DEFAULT_SCHEMA_REGISTRY_URL,
            lakehouse_dir=_lakehouse_dir(env.get("LAKEHOUSE_DIR") or DEFAULT_LAKEHOUSE_DIR),
            spark_master=spark_master,
            spark_remote=env.get("SPARK_REMOTE") or None,
            max_offsets_per_trigger=_positive_int(env, "MAX_OFFSETS_PER_TRIGGER", DEFAULT_MAX_OFFSETS_PER_TRIGGER),
            # A standalone master means the cluster profile; SPARK_PROFILE picks another profile file otherwise.
            spark_profile="cluster" if spark_master else env.get("SPARK_PROFILE") or DEFAULT_SPARK_PROFILE,
            kafka_security=KafkaSecurity(
                security_protocol=env.get("KAFKA_SECURITY_PROTOCOL") or "PLAINTEXT",
                sasl_mechanism=env.get("KAFKA_SASL_MECHANISM") or None,
                sasl_username_set=bool(env.get(KAFKA_SASL_USERNAME)),
                sasl_password_set=bool(env.get(KAFKA_SASL_PASSWORD)),
                ssl_ca_location=_existing_file(env, "KAFKA_SSL_CA_LOCATION"),
                ssl_keystore_location=_existing_file(env, "KAFKA_SSL_KEYSTORE_LOCATION"),
            ),
            registry_security=RegistrySecurity(
                basic_auth_set=bool(env.get(SCHEMA_REGISTRY_BASIC_AUTH_USER_INFO)),
                ssl_ca_location=_existing_file(env, "SCHEMA_REGISTRY_SSL_CA_LOCATION"),
                ssl_keystore_location=_existing_file(env, "SCHEMA_REGISTRY_SSL_KEYSTORE_LOCATION"),
            ),
        )
        return settings


DEFAULT_VACUUM_RETENTION_HOURS = 168.0
DEFAULT_MAINTENANCE_CRON = "0 3 * * *"
_CRON_ALIASES = ("@hourly", "@daily", "@weekly", "@monthly")


@dataclass(frozen=True)
class MaintenanceSettings:
    """Delta table maintenance (docs/maintenance.md): how many hours of history VACUUM keeps
    (`DELTA_VACUUM_RETENTION_HOURS`; below 168 the maintenance refuses to run) and when the maintenance job runs
    (`TABLE_MAINTENANCE_CRON`, UTC)."""

    vacuum_retention_hours: float = DEFAULT_VACUUM_RETENTION_HOURS
    cron_schedule: str = DEFAULT_MAINTENANCE_CRON

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> MaintenanceSettings:
        env = _environ(environ)
        return cls(
            vacuum_retention_hours=_positive_float(env, "DELTA_VACUUM_RETENTION_HOURS", DEFAULT_VACUUM_RETENTION_HOURS),
            cron_schedule=_cron(env, "TABLE_MAINTENANCE_CRON", DEFAULT_MAINTENANCE_CRON),
        )


def _cron(env: Mapping[str, str], name: str, default: str) -> str:
    """A cron schedule from the environment variable `name` (`default` when unset)."""
    cron = (env.get(name) or default).strip()
    if len(cron.split()) != 5 and cron not in _CRON_ALIASES:
        raise ConfigurationError(
            f"{name}={cron!r} is not a cron schedule: five fields (minute hour day month weekday, e.g. "
            f"'{default}') or one of {', '.join(_CRON_ALIASES)}"
        )
    return cron


#: Secrets, passed to the resources by name (`dagster.EnvVar`), never read into a value.
KAFKA_SASL_USERNAME = "KAFKA_SASL_USERNAME"
KAFKA_SASL_PASSWORD = "KAFKA_SASL_PASSWORD"
SCHEMA_REGISTRY_BASIC_AUTH_USER_INFO = "SCHEMA_REGISTRY_BASIC_AUTH_USER_INFO"

# ------------------------------------------------------------------ where the project's own files and caches are

SPARK_CONF_DIR = "STREAMING_PIPELINE_SPARK_CONF_DIR"
CACHE_DIR = "STREAMING_PIPELINE_CACHE_DIR"
MAVEN_REPOSITORY = "STREAMING_PIPELINE_MAVEN_REPOSITORY"
IVY_JAR = "STREAMING_PIPELINE_IVY_JAR"
STACK_DIR = "STREAMING_PIPELINE_STACK_DIR"


def _path(name: str, environ: Mapping[str, str] | None = None) -> Path | None:
    value = _environ(environ).get(name)
    return Path(value).expanduser() if value else None


def spark_conf_dir_override() -> Path | None:
    """$STREAMING_PIPELINE_SPARK_CONF_DIR: Spark profiles to read instead of the ones shipped with the package."""
    return _path(SPARK_CONF_DIR)


def cache_root() -> Path:
    """$STREAMING_PIPELINE_CACHE_DIR, else $XDG_CACHE_HOME/streaming-pipeline, else ~/.cache/streaming-pipeline."""
    override = _path(CACHE_DIR)
    if override:
        return override
    xdg = _path("XDG_CACHE_HOME")
    return (xdg or Path.home() / ".cache") / "streaming-pipeline"


def maven_repository() -> str | None:
    """$STREAMING_PIPELINE_MAVEN_REPOSITORY: the Maven repository to resolve jars from (default Maven Central)."""
    return os.environ.get(MAVEN_REPOSITORY) or None


def ivy_jar_override() -> Path | None:
    """$STREAMING_PIPELINE_IVY_JAR: the Apache Ivy jar to resolve with (default: the one pyspark ships)."""
    return _path(IVY_JAR)


def stack_dir_override() -> Path | None:
    """$STREAMING_PIPELINE_STACK_DIR: where `stack up` keeps its state (default ./.stack)."""
    return _path(STACK_DIR)


def java_home() -> str | None:
    """$JAVA_HOME, where the engine looks for `java` first."""
    return os.environ.get("JAVA_HOME") or None


def executable_path() -> str:
    """$PATH, where the engine looks for `java` after JAVA_HOME."""
    return os.environ.get("PATH", "")


def dagster_home() -> str | None:
    """$DAGSTER_HOME: the Dagster instance the command-line tools record their runs in (ephemeral when unset)."""
    return os.environ.get("DAGSTER_HOME") or None


def s3_client_settings() -> tuple[str | None, str | None]:
    """(AWS_ENDPOINT_URL, AWS_REGION or else AWS_DEFAULT_REGION): the S3 store the lakehouse's files are read from
    outside Spark, as every AWS SDK reads them. The keys are the SDK's to read (AWS_ACCESS_KEY_ID, ...), not ours."""
    region = os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION") or None
    return os.environ.get("AWS_ENDPOINT_URL") or None, region


def s3_keys() -> tuple[str | None, str | None]:
    """(AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY), each None when unset: the keys the code location's S3 client
    signs with. Handed to the client only, never printed."""
    return os.environ.get("AWS_ACCESS_KEY_ID") or None, os.environ.get("AWS_SECRET_ACCESS_KEY") or None


# pyspark's own switch: once set, its functions build Spark Connect expressions (see engine.spark.connect_session).
_SPARK_CONNECT_MODE = "SPARK_CONNECT_MODE_ENABLED"


def is_spark_connect_client() -> bool:
    """Whether this process has become a Spark Connect client."""
    return _SPARK_CONNECT_MODE in os.environ


def become_spark_connect_client() -> None:
    os.environ[_SPARK_CONNECT_MODE] = "1"
