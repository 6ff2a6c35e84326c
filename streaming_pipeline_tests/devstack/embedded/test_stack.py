"""The embedded stack: broker + registry under one directory, its state file and its CLI."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest

from streaming_pipeline.devstack.embedded import stack_cli
from streaming_pipeline.devstack.embedded.processes import pid_alive, process_command_line
from streaming_pipeline.devstack.embedded.stack import EmbeddedStack, running_stack
from streaming_pipeline.devstack.errors import StackError
from streaming_pipeline.lakehouse.errors import JavaNotFoundError
from streaming_pipeline_tests.cli_helpers import run_stack_cli
from streaming_pipeline_tests.devstack.embedded.helpers import FAKE_REGISTRY_MODULE, consume, produce

CONNECT_CLIENT = """
import sys
from streaming_pipeline.lakehouse.engine.spark import connect_session
session = connect_session(sys.argv[1])
session.range(5).write.format("delta").save(sys.argv[2])
print(session.read.format("delta").load(sys.argv[2]).count())
session.stop()
"""


@pytest.mark.integration
@pytest.mark.slow
def test_up_status_env_down_up(tmp_path: Path, stacks: list[EmbeddedStack]) -> None:
    stack = EmbeddedStack(
        tmp_path / "stack", prefer_standard_ports=False, registry_module=FAKE_REGISTRY_MODULE, spark=False
    )
    stacks.append(stack)
    progress: list[str] = []
    info = stack.up(progress=progress.append)
    assert not info.already_running
    assert info.directory == (tmp_path / "stack").resolve()
    assert info.bootstrap_servers.startswith("127.0.0.1:")
    assert info.schema_registry_url.startswith("http://127.0.0.1:")
    assert any("Kafka broker ready" in m for m in progress), progress
    assert {p.name for p in stack.directory.iterdir()} >= {"kafka", "registry", "logs", "stack.json"}
    assert {p.name for p in stack.logs_dir.iterdir()} >= {"kafka.log", "kafka.out", "registry.log"}

    state = json.loads(stack.state_file.read_text())
    assert state["kafka"]["pid"] == info.kafka_pid and state["registry"]["pid"] == info.registry_pid

    status = stack.status()
    assert status.running
    assert status.kafka.address == info.bootstrap_servers and status.kafka.pid == info.kafka_pid
    assert status.registry.address == info.schema_registry_url
    assert status.kafka.log_file == stack.logs_dir / "kafka.log"

    assert stack.env_lines() == [
        f"export KAFKA_BOOTSTRAP_SERVERS={info.bootstrap_servers}",
        f"export SCHEMA_REGISTRY_URL={info.schema_registry_url}",
        f"export DAGSTER_HOME={stack.directory / 'dagster'}",
        "export LIVE_MODE=triggered",
    ]
    assert not status.spark.enabled and info.spark_remote is None

    # up again: nothing new is started
    again = stack.up()
    assert again.already_running
    assert (again.kafka_pid, again.registry_pid) == (info.kafka_pid, info.registry_pid)

    produce(info.bootstrap_servers, "events", [("a", "1"), ("b", "2")])
    assert stack.down() is True
    assert not pid_alive(info.kafka_pid) and not pid_alive(info.registry_pid)
    status = stack.status()
    assert not status.kafka.running and not status.registry.running and status.kafka.pid is None
    with pytest.raises(StackError, match="not running"):
        stack.env_lines()
    assert stack.down() is False

    # a new object on the same directory: same ports, same data
    restarted = EmbeddedStack(
        tmp_path / "stack", prefer_standard_ports=False, registry_module=FAKE_REGISTRY_MODULE, spark=False
    )
    stacks.append(restarted)
    info2 = restarted.up()
    assert (info2.bootstrap_servers, info2.schema_registry_url) == (info.bootstrap_servers, info.schema_registry_url)
    assert info2.kafka_pid != info.kafka_pid
    assert sorted(consume(info2.bootstrap_servers, "events", 2)) == [("a", "1"), ("b", "2")]


@pytest.mark.integration
def test_running_stack_always_stops(tmp_path: Path) -> None:
    with pytest.raises(RuntimeError, match="boom"):
        with running_stack(tmp_path / "stack", registry_module=FAKE_REGISTRY_MODULE, spark=False) as info:
            kafka_pid, registry_pid = info.kafka_pid, info.registry_pid
            assert pid_alive(kafka_pid) and pid_alive(registry_pid)
            raise RuntimeError("boom")
    assert not pid_alive(kafka_pid) and not pid_alive(registry_pid)


def test_stale_state_is_stopped(tmp_path: Path) -> None:
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    directory = tmp_path / "stack"
    directory.mkdir()
    (directory / "stack.json").write_text(
        json.dumps(
            {
                "host": "127.0.0.1",
                "kafka": {"pid": dead.pid, "port": 1, "controller_port": 2},
                "registry": {"pid": os.getpid(), "port": 3},  # alive, but not a registry
            }
        )
    )
    stack = EmbeddedStack(directory)
    status = stack.status()
    assert not status.kafka.running and not status.registry.running
    assert status.kafka.address == "127.0.0.1:1"
    with pytest.raises(StackError, match="not running"):
        stack.info()
    assert stack.down() is False
    assert pid_alive(os.getpid())


def test_recorded_port_clash(tmp_path: Path) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen(1)
        port = sock.getsockname()[1]
        directory = tmp_path / "stack"
        directory.mkdir()
        (directory / "stack.json").write_text(json.dumps({"kafka": {"pid": None, "port": port}}))
        stack = EmbeddedStack(directory, prefer_standard_ports=False, spark=False)
        with pytest.raises(StackError) as caught:
            stack.up()
    message = str(caught.value)
    assert f"port {port} " in message
    assert str(directory / "stack.json") in message
    assert str(directory / "logs" / "kafka.log") in message


def test_missing_java(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path / "empty-bin"))
    monkeypatch.delenv("JAVA_HOME", raising=False)
    stack = EmbeddedStack(tmp_path / "stack", prefer_standard_ports=False)
    with pytest.raises(JavaNotFoundError, match="JAVA_HOME is not set"):
        stack.up()
    assert not stack.status().kafka.running


def test_cli_errors_are_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    directory = tmp_path / "stack"
    assert stack_cli.main(["stack", "env", "--dir", str(directory)]) == 1
    out, err = capsys.readouterr()
    assert out == ""
    assert err.startswith("error: ") and err.count("\n") == 1 and "stack up" in err

    assert stack_cli.main(["stack", "--dir", str(directory), "status"]) == 0
    out, _ = capsys.readouterr()
    assert "kafka" in out and "registry" in out and "stopped" in out

    monkeypatch.setenv("PATH", str(tmp_path / "empty-bin"))
    monkeypatch.setenv("JAVA_HOME", str(tmp_path / "no-jdk"))
    assert stack_cli.main(["stack", "up", "--dir", str(directory), "--free-ports"]) == 1
    _, err = capsys.readouterr()
    assert err.startswith("error: Java 17+ is needed") and err.count("\n") == 1


def test_stack_dir_default(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from streaming_pipeline.devstack.embedded.stack import default_stack_dir

    monkeypatch.delenv("STREAMING_PIPELINE_STACK_DIR", raising=False)
    monkeypatch.chdir(tmp_path)
    assert default_stack_dir() == tmp_path / ".stack"
    monkeypatch.setenv("STREAMING_PIPELINE_STACK_DIR", str(tmp_path / "elsewhere"))
    assert default_stack_dir() == tmp_path / "elsewhere"


@pytest.mark.integration
@pytest.mark.slow
def test_cli_with_real_registry_and_spark_connect(tmp_path: Path) -> None:
    """`stack up --object-store` in a separate process: the components (the Spark Connect engine and the object
    store too) outlive the command; the engine writes Delta to the store's bucket, which S3 clients read with what
    `stack env` exports; a later command stops them and the bucket's data stays."""
    directory = str(tmp_path / "stack")
    try:
        # The first start resolves s3proxy's jars and Hadoop's S3A connector into an empty cache (CI): minutes.
        up = run_stack_cli("up", "--dir", directory, "--free-ports", "--object-store", timeout=900)
        assert up.returncode == 0, up.stderr + up.stdout
        assert "Kafka broker ready" in up.stdout and "SCHEMA_REGISTRY_URL=" in up.stdout
        assert "Object store ready" in up.stdout and "LAKEHOUSE_DIR=s3a://lakehouse" in up.stdout

        env = run_stack_cli("env", "--dir", directory)
        assert env.returncode == 0, env.stderr
        lines = env.stdout.splitlines()
        assert [line.split("=")[0] for line in lines] == [
            "export KAFKA_BOOTSTRAP_SERVERS",
            "export SCHEMA_REGISTRY_URL",
            "export SPARK_REMOTE",
            "export DAGSTER_HOME",
            "export LAKEHOUSE_DIR",
            "export AWS_ENDPOINT_URL",
            "export AWS_ACCESS_KEY_ID",
            "export AWS_SECRET_ACCESS_KEY",
            "export AWS_REGION",
            "export AWS_ALLOW_HTTP",
            "export LIVE_MODE",
        ]
        values = dict(line.removeprefix("export ").split("=", 1) for line in lines)
        assert values["LIVE_MODE"] == "triggered"
        url = values["SCHEMA_REGISTRY_URL"]
        assert values["DAGSTER_HOME"] == str(tmp_path / "stack" / "dagster")
        assert "granularity: op" in (tmp_path / "stack" / "dagster" / "dagster.yaml").read_text()
        assert values["LAKEHOUSE_DIR"] == "s3a://lakehouse"
        assert values["AWS_ENDPOINT_URL"].startswith("http://127.0.0.1:") and values["AWS_ALLOW_HTTP"] == "true"
        secret = values["AWS_SECRET_ACCESS_KEY"]
        assert len(secret) >= 30 and secret not in up.stdout + up.stderr

        status = run_stack_cli("status", "--dir", directory)
        assert status.returncode == 0 and status.stdout.count("running") == 4, status.stdout
        assert values["AWS_ENDPOINT_URL"] in status.stdout
        as_json = json.loads(run_stack_cli("status", "--dir", directory, "--json").stdout)
        assert as_json["running"] and as_json["spark_remote"] == values["SPARK_REMOTE"]
        assert (as_json["spark_master_url"], as_json["spark_workers"]) == (None, 0)
        assert as_json["lakehouse_dir"] == "s3a://lakehouse"
        spark_pid = as_json["components"]["spark"]["pid"]
        engine_command = str(process_command_line(spark_pid))
        assert "spark.driver.memory=3g" in engine_command.split()  # the triggered mode's heap
        assert f"spark.hadoop.fs.s3a.endpoint={values['AWS_ENDPOINT_URL']}" in engine_command.split()
        assert secret not in engine_command  # S3A reads the keys from the engine's environment

        # the engine answers a client, and runs Delta on the object store (in a subprocess: pytest's own process
        # stays a classic driver)
        table = f"{values['LAKEHOUSE_DIR']}/probe"
        client = subprocess.run(
            [sys.executable, "-c", CONNECT_CLIENT, values["SPARK_REMOTE"], table],
            capture_output=True,
            text=True,
            timeout=180,
            check=False,
        )
        assert client.returncode == 0 and client.stdout.strip() == "5", client.stderr[-3000:]
        s3_env = {key: value for key, value in values.items() if key.startswith("AWS_")}
        assert _ids_read_by_delta_rs(table, s3_env) == [0, 1, 2, 3, 4]
        # The store checks the signature: a wrong secret is refused, as on AWS.
        refused = _refused_to_delta_rs(table, {**s3_env, "AWS_SECRET_ACCESS_KEY": "not-" + secret})
        assert "403" in refused and secret not in refused, refused[-2000:]
        assert (tmp_path / "stack" / "object-store" / "buckets" / "lakehouse" / "probe" / "_delta_log").is_dir()
        for log in (tmp_path / "stack" / "logs").glob("*.log"):
            assert secret not in log.read_text(errors="replace"), f"the store's secret is in {log}"

        # the registry keeps what it was given across down/up
        schema = {"type": "record", "name": "Ping", "fields": [{"name": "n", "type": "int"}]}
        request = urllib.request.Request(
            f"{url}/subjects/ping-value/versions",
            data=json.dumps({"schema": json.dumps(schema)}).encode(),
            headers={"Content-Type": "application/vnd.schemaregistry.v1+json"},
            method="POST",
        )
        with urllib.request.urlopen(request, timeout=10) as response:
            schema_id = json.load(response)["id"]
        produce(values["KAFKA_BOOTSTRAP_SERVERS"], "pings", [("k", "v")])

        # The continuous mode chosen while the engine runs: it keeps its heap until it restarts, and says so.
        switched = run_stack_cli("up", "--dir", directory, "--live-mode", "continuous")
        assert switched.returncode == 0 and "keeps its 3g heap" in switched.stdout, switched.stdout

        down = run_stack_cli("down", "--dir", directory)
        assert down.returncode == 0 and "stopped" in down.stdout, down.stderr
        status = run_stack_cli("status", "--dir", directory)
        assert status.stdout.count("stopped") == 4, status.stdout
        assert not pid_alive(spark_pid)

        up = run_stack_cli("up", "--dir", directory)
        assert up.returncode == 0, up.stderr + up.stdout
        env_lines = run_stack_cli("env", "--dir", directory).stdout.splitlines()
        # Same addresses; the continuous mode recorded, and the engine started again with its smaller heap.
        assert env_lines == [*lines[:-1], "export LIVE_MODE=continuous"]
        status_json = json.loads(run_stack_cli("status", "--dir", directory, "--json").stdout)
        spark_pid = status_json["components"]["spark"]["pid"]
        assert "spark.driver.memory=1g" in str(process_command_line(spark_pid)).split()
        with urllib.request.urlopen(f"{url}/subjects", timeout=10) as response:
            assert json.load(response) == ["ping-value"]
        with urllib.request.urlopen(f"{url}/schemas/ids/{schema_id}", timeout=10) as response:
            assert json.loads(json.load(response)["schema"]) == schema
        assert consume(values["KAFKA_BOOTSTRAP_SERVERS"], "pings", 1) == [("k", "v")]
        assert _ids_read_by_delta_rs(table, s3_env) == [0, 1, 2, 3, 4]  # the bucket kept its table, same keys
    finally:
        run_stack_cli("down", "--dir", directory)


def _ids_read_by_delta_rs(table: str, s3_env: dict[str, str]) -> list[int]:
    """The `id`s of a Delta table on the object store, read by delta-rs with only the S3 variables given (in a
    process of its own, whose environment has no other AWS setting)."""
    code = (
        "import sys, deltalake; table = deltalake.DeltaTable(sys.argv[1]); "
        "rows = deltalake.QueryBuilder().register('t', table).execute('select id from t').read_all(); "
        "print(sorted(rows.column('id').to_pylist()))"
    )
    clean = {key: value for key, value in os.environ.items() if not key.startswith("AWS_")}
    done = subprocess.run(
        [sys.executable, "-c", code, table],
        env={**clean, **s3_env},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return [int(value) for value in done.stdout.strip().strip("[]").split(", ")]


def _refused_to_delta_rs(table: str, s3_env: dict[str, str]) -> str:
    """What delta-rs says when it cannot read `table` with `s3_env`."""
    clean = {key: value for key, value in os.environ.items() if not key.startswith("AWS_")}
    done = subprocess.run(
        [sys.executable, "-c", "import sys, deltalake; deltalake.DeltaTable(sys.argv[1])", table],
        env={**clean, **s3_env},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode != 0, done.stdout
    return done.stderr


def test_security_and_the_number_of_kafka_nodes_are_fixed_once_kafka_exists(tmp_path: Path) -> None:
    """Kafka's SCRAM users and its controller quorum are made when its storage is formatted: a stack whose Kafka
    exists refuses --secure and another --kafka-brokers, before it starts anything, and says the way out."""
    directory = tmp_path / "stack"
    (directory / "kafka" / "data").mkdir(parents=True)
    (directory / "kafka" / "data" / "meta.properties").write_text("cluster.id=x\nnode.id=1\n")
    for options, said in (
        ({"secure": True}, "was made without --secure"),
        ({"kafka_brokers": 3}, r"has 1 node\(s\); for 3"),
    ):
        with pytest.raises(StackError, match=said) as refused:
            EmbeddedStack(directory, spark=False, **options).up(timeout=5)  # type: ignore[arg-type]
        assert "use another --dir" in str(refused.value)
    assert not (directory / "stack.json").exists() or "secure" not in json.loads((directory / "stack.json").read_text())


def test_a_secured_stack_exports_every_client_setting_shell_quoted(tmp_path: Path) -> None:
    """`stack env` of a secured stack: the protocol, mechanism, users, passwords and the files clients need, each
    value quoted for the shell."""
    from streaming_pipeline.devstack.embedded.secure import SecureMaterial
    from streaming_pipeline.devstack.embedded.stack import StackInfo

    material = SecureMaterial.read_or_make(tmp_path / "secure")
    assert {path.name: oct(path.stat().st_mode & 0o777) for path in material.directory.iterdir()} == {
        "ca.pem": "0o644",
        "server.pem": "0o600",
        "client.pem": "0o600",
        "passwords.json": "0o600",
        "registry-users": "0o600",
    }
    info = StackInfo(
        tmp_path / "dir with space", "127.0.0.1:1", "https://127.0.0.1:2", secure_env=material.client_env()
    )
    env = info.env()
    assert env["KAFKA_SECURITY_PROTOCOL"] == "SASL_SSL" and env["KAFKA_SASL_MECHANISM"] == "SCRAM-SHA-512"
    assert env["SCHEMA_REGISTRY_BASIC_AUTH_USER_INFO"] == f"pipeline:{material.passwords().registry}"
    assert env["KAFKA_SSL_CA_LOCATION"] == str(material.ca_file)
    assert "secure_env" not in repr(info) or material.passwords().kafka_client not in repr(info)
