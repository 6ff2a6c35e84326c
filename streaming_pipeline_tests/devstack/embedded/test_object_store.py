"""The object store's pieces that need no server: its keys, its settings file, what S3 clients and the engine get.
The store itself runs in test_stack.py's CLI test (`stack up --object-store`), where the engine writes to it."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest

from streaming_pipeline.devstack.embedded.object_store import EmbeddedObjectStore, client_env, read_or_make_credentials
from streaming_pipeline.lakehouse.engine import jars
from streaming_pipeline.lakehouse.engine import spark as spark_module
from streaming_pipeline.lakehouse.engine.log_store import LOG_STORE_CONF


def test_the_keys_are_made_once_readable_by_their_owner_only_and_kept(tmp_path: Path) -> None:
    path = tmp_path / "object-store" / "credentials"
    key_id, secret = read_or_make_credentials(path)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert key_id.startswith("devstack") and len(secret) >= 30
    assert read_or_make_credentials(path) == (key_id, secret)  # the next start takes the same keys
    assert read_or_make_credentials(tmp_path / "other" / "credentials")[1] != secret  # another store, other keys


def test_the_settings_file_names_the_bucket_folder_and_keys_and_only_its_owner_reads_it(tmp_path: Path) -> None:
    store = EmbeddedObjectStore(tmp_path / "store", port=29999, bucket="lake")
    store.data_dir.mkdir()
    store.write_config()
    key_id, secret = store.credentials()
    lines = store.properties_file.read_text().splitlines()
    assert {line.split("=", 1)[0]: line.split("=", 1)[1] for line in lines[1:]} == {
        "s3proxy.endpoint": "http://127.0.0.1:29999",
        "s3proxy.authorization": "aws-v2-or-v4",
        "s3proxy.identity": key_id,
        "s3proxy.credential": secret,
        "jclouds.provider": "filesystem",
        "jclouds.filesystem.basedir": str(tmp_path / "store" / "buckets"),
    }
    assert stat.S_IMODE(store.properties_file.stat().st_mode) == 0o600
    assert (tmp_path / "store" / "buckets" / "lake").is_dir()  # the filesystem backend's bucket is a folder
    assert store.client_env() == {
        "AWS_ENDPOINT_URL": "http://127.0.0.1:29999",
        "AWS_ACCESS_KEY_ID": key_id,
        "AWS_SECRET_ACCESS_KEY": secret,
        "AWS_REGION": "us-east-1",
        "AWS_ALLOW_HTTP": "true",
    }


def test_a_store_on_https_does_not_allow_plain_http() -> None:
    assert "AWS_ALLOW_HTTP" not in client_env("https://s3.example.test", "id", "secret")


def test_s3a_settings_bring_the_connector_and_hold_no_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(jars, "spark_jars", lambda: [Path("/engine/delta-spark.jar")])
    monkeypatch.setattr(jars, "s3a_jars", lambda: [Path("/engine/hadoop-aws.jar"), Path("/engine/bundle.jar")])
    settings = spark_module.s3a_conf("http://127.0.0.1:9000", "us-east-1")
    assert settings["spark.hadoop.fs.s3a.endpoint"] == "http://127.0.0.1:9000"
    assert settings["spark.hadoop.fs.s3a.path.style.access"] == "true"
    assert settings["spark.hadoop.fs.s3a.connection.ssl.enabled"] == "false"
    assert not [key for key in settings if "key" in key.split(".")[-1]]  # the keys come from the environment
    own_log_store = {LOG_STORE_CONF: "io.delta.storage.LocalLogStore"}  # no compile against the stand-in jars
    on_s3 = spark_module.engine_conf("local", extra={**settings, **own_log_store})
    assert on_s3["spark.jars"].split(",")[:3] == [
        "/engine/delta-spark.jar",
        "/engine/hadoop-aws.jar",
        "/engine/bundle.jar",
    ]
    assert (
        "hadoop-aws" not in spark_module.engine_conf("local", extra=own_log_store)["spark.jars"]
    )  # a local lakehouse needs none of it
    assert spark_module.s3a_conf("https://s3.example.test", "eu-west-1")[
        "spark.hadoop.fs.s3a.connection.ssl.enabled"
    ] == ("true")


def test_the_s3a_connector_matches_the_hadoop_client_pyspark_ships() -> None:
    hadoop = jars.pyspark_hadoop_version()
    assert (jars.pyspark_home() / "jars" / f"hadoop-client-api-{hadoop}.jar").is_file()
    assert jars.s3a_artifacts().coordinates == (("org.apache.hadoop", "hadoop-aws", hadoop),)
