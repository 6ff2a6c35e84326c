"""The package as a deployment gets it: a wheel built from the working tree, installed into a new virtual environment
with its base requirements only (no `stack`, no `dev`), used from a directory outside the checkout. The schemas, the
Spark profiles and the defs folder's dg.toml are package data; nothing may come from the repository."""

from __future__ import annotations

import email.parser
import json
import os
import shutil
import subprocess
import sys
import zipfile
from email.message import Message
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from streaming_pipeline.devstack.project import project_sources

REPO = Path(__file__).resolve().parents[1]

#: Every table of the pipeline, one asset each.
EXPECTED_ASSETS = {
    "raw_rides",
    "raw_pickup_locations",
    "dead_letter_records",
    "high_amount_rides",
    "low_amount_rides",
    "taxi_zones",
    "taxi_zones_history",
    "rides_enriched",
    "ride_pickup_joins",
    "join_late_rows",
    "vendor_counts",
    "ride_window_aggregates",
}
#: Each source topic's schema files: the key's Avro type, the value's record (namespace.name).
EXPECTED_SCHEMAS = {
    "rides": {"ride_key.avsc": "int", "ride_value.avsc": "streaming_pipeline.rides.Ride"},
    "pickup_locations": {
        "pickup_location_key.avsc": "int",
        "pickup_location_value.avsc": "streaming_pipeline.pickups.PickupLocation",
    },
    "taxi_zones": {
        "taxi_zone_key.avsc": "streaming_pipeline.zones.TaxiZoneKey",
        "taxi_zone_value.avsc": "streaming_pipeline.zones.TaxiZone",
    },
}
#: The development stack and the tools: only in an extra, never in the base requirements.
EXTRA_ONLY = {
    "dagster-webserver": 'extra == "stack"',
    "fastapi": 'extra == "stack"',
    "uvicorn": 'extra == "stack"',
    "tqdm": 'extra == "stack"',
    "httpx": 'extra == "dev"',
}

# Run by the installed package's Python in a directory outside the checkout; prints one JSON object.
PROBE = """
import importlib.util, json, sys
from importlib import resources
from pathlib import Path

import dagster as dg
import streaming_pipeline
from streaming_pipeline.definitions import defs
from streaming_pipeline.lakehouse.engine.spark import read_profile
from streaming_pipeline.components.kafka_delta_source import declared_sources
from streaming_pipeline.lakehouse.schemas import load_schema

dg.Definitions.validate_loadable(defs)
sources = declared_sources(defs.component_tree)
package = resources.files("streaming_pipeline")
print(json.dumps({
    "package_file": streaming_pipeline.__file__,
    "sys_path": sys.path,
    "asset_keys": sorted(key.to_user_string() for key in defs.resolve_asset_graph().get_all_asset_keys()),
    "sources": {
        s.topic: {Path(name).name: load_schema(name) for name in (s.key_schema, s.value_schema)}
        for s in sources
    },
    "bronze_columns": {s.bronze_table: s.table.column_names for s in sources},
    "profiles": {name: read_profile(name) for name in ("local", "cluster")},
    "package_data": {
        name: (package / name).is_file()
        for name in (
            "dg.toml",
            "py.typed",
            "lakehouse/data/taxi_zone_lookup.csv",
            "lakehouse/engine/jvm/FastListFromLocalLogStore.java",
        )
    },
    "devstack_loaded": sorted(m for m in sys.modules if m.startswith("streaming_pipeline.devstack")),
    "fastapi_installed": importlib.util.find_spec("fastapi") is not None,
}))
"""


def _run(args: list[str | Path], **kwargs) -> subprocess.CompletedProcess[str]:
    done = subprocess.run([str(a) for a in args], capture_output=True, text=True, **kwargs)
    assert done.returncode == 0, f"{' '.join(map(str, args))} exited {done.returncode}:\n{done.stdout}\n{done.stderr}"
    return done


def _copy_working_tree(destination: Path) -> None:
    """The checkout's files as git sees them (tracked and new, not ignored: no build/, no *.egg-info, no caches),
    symlinks as symlinks. Building from a copy keeps a stale build/lib of the checkout out of the wheel."""
    if shutil.which("git") is None or not (REPO / ".git").exists():
        pytest.fail("the wheel is built from a git checkout: git or .git not found")
    listed = _run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=REPO).stdout
    for name in filter(None, listed.split("\0")):
        source, target = REPO / name, destination / name
        if not source.is_symlink() and not source.is_file():
            continue  # deleted in the working tree, not yet in the index
        target.parent.mkdir(parents=True, exist_ok=True)
        if source.is_symlink():
            target.symlink_to(os.readlink(source))
        else:
            shutil.copy2(source, target)


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    source = tmp_path_factory.mktemp("source")
    _copy_working_tree(source)
    out = tmp_path_factory.mktemp("dist")
    _run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--quiet", "--disable-pip-version-check", "-w", out, source]
    )
    (built,) = out.glob("streaming_pipeline-*.whl")
    return built


def _metadata(wheel: Path) -> Message:
    with zipfile.ZipFile(wheel) as archive:
        (name,) = [n for n in archive.namelist() if n.endswith(".dist-info/METADATA")]
        return email.parser.Parser().parsestr(archive.read(name).decode())


def test_the_wheel_requires_the_engine_pair_and_leaves_the_development_stack_to_extras(wheel: Path) -> None:
    requirements = [Requirement(r) for r in _metadata(wheel).get_all("Requires-Dist")]
    base = {canonicalize_name(r.name): r for r in requirements if r.marker is None}
    extra_only = {
        name: {str(r.marker) for r in requirements if canonicalize_name(r.name) == name} for name in EXTRA_ONLY
    }
    assert extra_only == {name: {marker} for name, marker in EXTRA_ONLY.items()}
    assert not base.keys() & EXTRA_ONLY.keys()
    assert str(base["pyspark"].specifier) == "==4.2.0" and base["pyspark"].extras == {"connect"}
    assert str(base["delta-spark"].specifier) == "==4.4.0"
    assert {"dagster", "dagster-postgres", "pandas"} <= base.keys()
    # The dev extra takes the stack extra by naming the project itself.
    assert 'streaming-pipeline[stack]; extra == "dev"' in _metadata(wheel).get_all("Requires-Dist")


@pytest.mark.slow
def test_the_installed_wheel_loads_the_code_location_outside_the_checkout(wheel: Path, tmp_path: Path) -> None:
    venv = tmp_path / "venv"
    _run([sys.executable, "-m", "venv", venv])
    python = venv / "bin" / "python"
    # The base requirements at constraints.txt's versions (from pip's cache after the suite's own install).
    _run(
        [
            python,
            "-m",
            "pip",
            "install",
            "--quiet",
            "--disable-pip-version-check",
            wheel,
            "-c",
            REPO / "constraints.txt",
        ]
    )

    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (tmp_path / "probe.py").write_text(PROBE)
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("PYTHON", "STREAMING_PIPELINE_")) and k not in ("VIRTUAL_ENV", "DAGSTER_HOME")
    }
    # -I: no PYTHON* variables, no user site-packages, not even the script's directory on sys.path.
    done = _run([python, "-I", tmp_path / "probe.py"], cwd=elsewhere, env=env)
    found = json.loads(done.stdout.strip().splitlines()[-1])

    site_packages = Path(found["package_file"]).parents[1]
    assert site_packages.is_relative_to(venv), found["package_file"]
    assert not any(str(REPO) in entry for entry in found["sys_path"]), found["sys_path"]
    assert set(found["asset_keys"]) == EXPECTED_ASSETS
    # The schemas and profiles the wheel ships are the checkout's, byte for byte.
    assert {
        topic: {name: _avro_name(json.loads(text)) for name, text in schemas.items()}
        for topic, schemas in found["sources"].items()
    } == EXPECTED_SCHEMAS
    for schemas in found["sources"].values():
        for name, text in schemas.items():
            assert text == (REPO / "schemas" / name).read_text()
    assert found["bronze_columns"] == {s.bronze_table: s.table.column_names for s in project_sources()}
    assert found["profiles"]["local"]["spark.master"] == "local[*]"
    assert found["profiles"]["local"]["spark.sql.shuffle.partitions"] == "2"
    assert found["profiles"]["cluster"]["spark.sql.shuffle.partitions"] == "8"
    assert "spark.master" not in found["profiles"]["cluster"]
    for name in ("local", "cluster"):
        assert found["profiles"][name] == _read_conf(REPO / "spark_conf" / f"{name}.conf")
    assert found["package_data"] == {
        "dg.toml": True,
        "py.typed": True,
        "lakehouse/data/taxi_zone_lookup.csv": True,
        "lakehouse/engine/jvm/FastListFromLocalLogStore.java": True,
    }
    # The code location without the development stack: none of it loaded, and the base install lacks it.
    assert found["devstack_loaded"] == []
    assert found["fastapi_installed"] is False
    # The console script is installed and starts (its commands import what they need when run).
    assert (
        "usage: streaming-pipeline"
        in _run([venv / "bin" / "streaming-pipeline", "--help"], cwd=elsewhere, env=env).stdout
    )


def _avro_name(schema: str | dict) -> str:
    """A record's full name (namespace.name); a primitive's type."""
    if isinstance(schema, str):
        return schema
    if schema["type"] != "record":
        return schema["type"]
    return f"{schema['namespace']}.{schema['name']}" if schema.get("namespace") else schema["name"]


def _read_conf(path: Path) -> dict[str, str]:
    """spark-defaults.conf format, read independently of the package: key, whitespace, value; # comments."""
    conf = {}
    for line in path.read_text().splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            key, value = line.split(None, 1)
            conf[key] = value.strip()
    return conf
