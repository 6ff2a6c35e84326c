"""An S3-compatible object store for the development stack: s3proxy (`org.gaul:s3proxy`, Apache-2.0) with its
filesystem backend, run from its Maven jars like the Kafka broker.

    store = EmbeddedObjectStore(stack_dir / "object-store")   # a free port on 127.0.0.1
    store.start()                                              # blocks until it answers HTTP
    ... deltalake.write_deltalake(f"s3://{store.bucket}/t", data, storage_options=store.client_env()) ...
    store.stop()

Layout of ``data_dir``: ``s3proxy.properties`` (the server's settings), ``logback.xml``, ``credentials`` (the
access key and secret made at the first start, mode 0600, kept across restarts) and ``buckets/`` (one folder per
bucket, an object per file: the lakehouse's bucket is made before the first start). Requests must be signed (AWS
signature v2 or v4) with that key: a wrong secret is refused with 403, as on AWS.
"""

from __future__ import annotations

import functools
import json
import os
import secrets
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Self

from streaming_pipeline.devstack.embedded.ports import LOOPBACK, free_port
from streaming_pipeline.devstack.embedded.processes import ManagedProcess
from streaming_pipeline.lakehouse.engine import jars
from streaming_pipeline.lakehouse.engine.java import find_java

DEFAULT_BUCKET = "lakehouse"
# Any region name: the store has one; clients sign their requests with it.
REGION = "us-east-1"
DEFAULT_HEAP = "256m"

_LOGBACK = """<!-- Written by streaming_pipeline.devstack.embedded.object_store: warnings, and s3proxy's start-up. -->
<configuration>
  <appender name="console" class="ch.qos.logback.core.ConsoleAppender">
    <encoder><pattern>%d{yy/MM/dd HH:mm:ss} %level %logger{1}: %msg%n</pattern></encoder>
  </appender>
  <logger name="org.gaul.s3proxy" level="INFO"/>
  <root level="WARN"><appender-ref ref="console"/></root>
</configuration>
"""


def store_answers(url: str, timeout: float = 1.0) -> bool:
    """True when ``url`` answers HTTP at all: an unsigned request gets 403 from a store that works."""
    try:
        with urllib.request.urlopen(url, timeout=timeout):
            return True
    except urllib.error.HTTPError:
        return True
    except (urllib.error.URLError, OSError, ValueError):
        return False


def read_or_make_credentials(path: Path) -> tuple[str, str]:
    """(access key id, secret access key) from ``path``; made and written there (mode 0600) the first time."""
    try:
        stored = json.loads(path.read_text())
        return str(stored["access_key_id"]), str(stored["secret_access_key"])
    except FileNotFoundError:
        pass
    key_id, secret = "devstack" + secrets.token_hex(6), secrets.token_urlsafe(30)
    path.parent.mkdir(parents=True, exist_ok=True)
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(descriptor, "w") as file:
        json.dump({"access_key_id": key_id, "secret_access_key": secret}, file)
    return key_id, secret


class EmbeddedObjectStore(ManagedProcess):
    """One s3proxy process serving ``data_dir/buckets`` over S3's HTTP API on ``host:port`` only."""

    title = "the object store"

    def __init__(
        self,
        data_dir: Path,
        port: int | None = None,
        host: str = LOOPBACK,
        *,
        bucket: str = DEFAULT_BUCKET,
        log_dir: Path | None = None,
        heap: str = DEFAULT_HEAP,
    ) -> None:
        super().__init__()
        self.data_dir = Path(data_dir).resolve()
        self.host = host
        self.port: int = port if port is not None else free_port(host)
        self.bucket = bucket
        self.log_dir = Path(log_dir).resolve() if log_dir else self.data_dir
        self.heap = heap

    # ------------------------------------------------------------------ properties

    @property
    def endpoint_url(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def log_file(self) -> Path:
        return self.log_dir / "object-store.log"

    @property
    def properties_file(self) -> Path:
        return self.data_dir / "s3proxy.properties"

    @property
    def credentials_file(self) -> Path:
        return self.data_dir / "credentials"

    @property
    def buckets_dir(self) -> Path:
        return self.data_dir / "buckets"

    def credentials(self) -> tuple[str, str]:
        """(access key id, secret access key) of this store, made at its first start."""
        return read_or_make_credentials(self.credentials_file)

    def client_env(self) -> dict[str, str]:
        """The variables every S3 client reads (boto3, delta-rs, the AWS CLI) to reach this store."""
        return client_env(self.endpoint_url, *self.credentials())

    # ------------------------------------------------------------------ process

    def write_config(self) -> None:
        key_id, secret = self.credentials()
        (self.buckets_dir / self.bucket).mkdir(parents=True, exist_ok=True)  # a bucket is a folder of the backend
        properties = {
            "s3proxy.endpoint": self.endpoint_url,
            "s3proxy.authorization": "aws-v2-or-v4",
            "s3proxy.identity": key_id,
            "s3proxy.credential": secret,
            "jclouds.provider": "filesystem",
            "jclouds.filesystem.basedir": str(self.buckets_dir),
        }
        text = "# Written by streaming_pipeline.devstack.embedded.object_store at each start.\n"
        text += "".join(f"{key}={value}\n" for key, value in properties.items())
        descriptor = os.open(self.properties_file, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(descriptor, "w") as file:  # it holds the secret: readable by its owner only
            file.write(text)
        (self.data_dir / "logback.xml").write_text(_LOGBACK)

    def command(self) -> list[str]:
        classpath = os.pathsep.join(str(jar) for jar in jars.object_store_classpath())
        return [
            str(find_java()),
            f"-Xmx{self.heap}",
            f"-Dlogback.configurationFile={self.data_dir / 'logback.xml'}",
            "-cp",
            classpath,
            jars.OBJECT_STORE_MAIN_CLASS,
            "--properties",
            str(self.properties_file),
        ]

    def start(self, timeout: float = 60.0) -> Self:
        """Start the store and wait until it answers HTTP (StackError naming the log if not)."""
        if self.running:
            return self
        self._check_port_free(self.port)
        jars.object_store_classpath()  # resolve (once) before the clock starts
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.write_config()
        self._start_process(
            self.command(),
            cwd=self.data_dir,
            label=f"s3proxy {jars.S3PROXY_VERSION} on {self.endpoint_url}",
            timeout=timeout,
        )
        return self

    def _readiness_probe(self) -> Callable[[], bool]:
        return functools.partial(store_answers, self.endpoint_url)

    def _not_ready_in_time(self, timeout: float) -> str:
        return f"did not answer on {self.endpoint_url} within {timeout:.0f}s"

    def _described(self) -> tuple[object, ...]:
        return (self.endpoint_url, self.data_dir)


def client_env(endpoint_url: str, access_key_id: str, secret_access_key: str) -> dict[str, str]:
    """AWS_ENDPOINT_URL, the keys, AWS_REGION, and AWS_ALLOW_HTTP for a store on plain http (delta-rs)."""
    env = {
        "AWS_ENDPOINT_URL": endpoint_url,
        "AWS_ACCESS_KEY_ID": access_key_id,
        "AWS_SECRET_ACCESS_KEY": secret_access_key,
        "AWS_REGION": REGION,
    }
    if endpoint_url.startswith("http://"):
        env["AWS_ALLOW_HTTP"] = "true"
    return env
