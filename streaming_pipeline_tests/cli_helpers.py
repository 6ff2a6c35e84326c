"""Running the pipeline's commands as a user types them, for tests that drive whole runs in subprocesses."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Mapping
from typing import IO, Any

from streaming_pipeline.devstack.cli import main as cli_main
from streaming_pipeline.devstack.embedded.dagster_dev import MACHINE_SETTINGS
from streaming_pipeline_tests.kafka_helpers import REPO_ROOT

# `dagster asset materialize -m streaming_pipeline.definitions --select '*'`: every asset, in one run.
MATERIALIZE_EVERY_ASSET = [
    sys.executable,
    "-m",
    "dagster",
    "asset",
    "materialize",
    "-m",
    "streaming_pipeline.definitions",
    "--select",
    "*",
]


#: The continuous mode's run from the command line: every streaming query, until it is stopped.
EXECUTE_THE_CONTINUOUS_JOB = [
    sys.executable,
    "-m",
    "dagster",
    "job",
    "execute",
    "-m",
    "streaming_pipeline.definitions",
    "-j",
    "continuous_streams_job",
]


def start_materializing_every_asset(env: Mapping[str, str], out: IO[bytes]) -> subprocess.Popen[bytes]:
    """MATERIALIZE_EVERY_ASSET: see `start_in_a_group_of_its_own`."""
    return start_in_a_group_of_its_own(MATERIALIZE_EVERY_ASSET, env, out)


def start_in_a_group_of_its_own(command: list[str], env: Mapping[str, str], out: IO[bytes]) -> subprocess.Popen[bytes]:
    """`command` from the repository, with `env`, its output in `out`, in a process group of its own (so that the
    whole run, Spark's JVM included, can be killed)."""
    return subprocess.Popen(
        command,
        cwd=REPO_ROOT,
        env=env,
        stdout=out,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        start_new_session=True,
    )


def run_stack_cli(*args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    """`streaming-pipeline stack <args>` in a process of its own, from the repository; its output captured."""
    return subprocess.run(
        [sys.executable, "-m", "streaming_pipeline.devstack.embedded.stack_cli", "stack", *args],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


_PIPELINE_PREFIXES = ("SPARK_", "RIDE_", "JOIN_", "OFFSET_SENSOR_", "KAFKA_", "SCHEMA_REGISTRY_", "DAGSTER_")
_PIPELINE_VARIABLES = ("LAKEHOUSE_DIR", "HIGH_AMOUNT_THRESHOLD", "MAX_OFFSETS_PER_TRIGGER")


def environment_without(prefixes: tuple[str, ...], names: tuple[str, ...] = ()) -> dict[str, str]:
    """This process's environment minus the variables whose names start with `prefixes` or are `names`, but for the
    machine's settings (`dagster_dev.MACHINE_SETTINGS`: the session's Spark scratch, conftest.py), for a subprocess
    that gets its own settings."""
    return {
        name: value
        for name, value in os.environ.items()
        if name in MACHINE_SETTINGS or not (name.startswith(prefixes) or name in names)
    }


def environment_without_pipeline_settings() -> dict[str, str]:
    """This process's environment minus every variable the pipeline reads, for a subprocess that gets its own."""
    return environment_without(_PIPELINE_PREFIXES, _PIPELINE_VARIABLES)


def produce_with_cli(stack: Any, *args: str) -> None:
    """`streaming-pipeline produce <args> --no-progress` against the stack's broker and registry."""
    code = cli_main(
        [
            "produce",
            *args,
            "--no-progress",
            "--bootstrap-servers",
            stack.bootstrap_servers,
            "--schema-registry-url",
            stack.schema_registry_url,
        ]
    )
    assert code == 0, f"produce {' '.join(args)} exited with {code}"
