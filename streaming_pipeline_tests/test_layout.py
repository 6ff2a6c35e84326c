"""The configuration that CI's `lint-imports` and `dg check defs` read (pyproject.toml). CI runs both tools
before the suite; these tests only check that what they are told to check exists, so that a renamed module
cannot leave a contract or the code location pointing at nothing."""

from __future__ import annotations

import importlib
import importlib.util
import os
import tomllib
from pathlib import Path

import dagster as dg

PYPROJECT = tomllib.loads((Path(__file__).resolve().parents[1] / "pyproject.toml").read_text())


def test_every_module_the_import_contracts_name_exists_and_no_module_is_on_both_sides() -> None:
    contracts = PYPROJECT["tool"]["importlinter"]["contracts"]
    assert len(contracts) == 2
    for contract in contracts:
        assert contract["type"] == "forbidden"
        own = [m for m in contract["forbidden_modules"] if m.startswith("streaming_pipeline")]
        for module in [*contract["source_modules"], *own]:
            assert importlib.util.find_spec(module) is not None, f"{contract['name']}: {module} does not exist"
        assert not set(contract["source_modules"]) & set(contract["forbidden_modules"]), contract["name"]
    library, code_location = contracts
    assert "dagster" in library["forbidden_modules"]
    assert set(code_location["source_modules"]) <= set(library["forbidden_modules"])
    assert "streaming_pipeline.devstack" in code_location["forbidden_modules"]


def test_dg_and_dagster_name_one_code_location_whose_target_module_defines_the_definitions() -> None:
    project, dagster = PYPROJECT["tool"]["dg"]["project"], PYPROJECT["tool"]["dagster"]
    assert PYPROJECT["tool"]["dg"]["directory_type"] == "project"
    assert project["code_location_name"] == dagster["code_location_name"] == "streaming_pipeline"
    assert project["code_location_target_module"] == dagster["module_name"] == "streaming_pipeline.definitions"
    assert importlib.import_module(project["defs_module"]).__path__  # a package, which dg walks
    target = importlib.import_module(project["code_location_target_module"])
    assert isinstance(target.defs, dg.Definitions)


# Run in a copy of the package without its code location; prints one JSON object.
_LIBRARY_PROBE = """
import importlib, json, pkgutil, sys

found = []
for name in sys.argv[1:]:
    module = importlib.import_module(name)
    found.append(module.__file__)
    for info in pkgutil.walk_packages(getattr(module, "__path__", []), prefix=name + "."):
        found.append(importlib.import_module(info.name).__file__)
from streaming_pipeline import tables
print(json.dumps({
    "files": found,
    "raw_rides": [[c.name, c.type, c.description] for c in tables.RAW_RIDES.columns],
    "raw_pickup_locations": tables.RAW_PICKUP_LOCATIONS.column_names,
    "high_amount_rides": tables.HIGH_AMOUNT_RIDES.column_names,
    "topics": [tables.RIDES.topic, tables.PICKUP_LOCATIONS.topic],
    "loaded": sorted(m for m in sys.modules if m.split(".")[0] in ("dagster", "yaml")),
}))
"""


def test_the_library_imports_and_declares_its_tables_without_the_code_location(tmp_path: Path) -> None:
    """Every module of the library (the first contract's source modules) imports from a copy of the package that has
    no `defs/` and no other part of the code location: the library reads none of its files."""
    import json
    import shutil
    import subprocess
    import sys

    package = Path(__file__).resolve().parents[1] / "streaming_pipeline"
    copy = tmp_path / "streaming_pipeline"
    library_contract, code_location_contract = PYPROJECT["tool"]["importlinter"]["contracts"]
    # The code location's modules and the development stack, as the contracts name them: packages and modules alike.
    parts = [*code_location_contract["source_modules"], "streaming_pipeline.devstack"]
    left_out = {"__pycache__", *(f"{m.rsplit('.', 1)[-1]}{suffix}" for m in parts for suffix in ("", ".py"))}
    shutil.copytree(package, copy, ignore=lambda _, names: {n for n in names if n in left_out})
    assert not (copy / "defs").exists() and not (copy / "streamed_table.py").exists()
    library = library_contract["source_modules"]
    done = subprocess.run(
        [sys.executable, "-c", _LIBRARY_PROBE, *library],
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(tmp_path)},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    found = json.loads(done.stdout)
    assert found["files"] and all(Path(f).is_relative_to(copy) for f in found["files"]), found["files"]
    assert found["loaded"] == []
    schemas = package.parent / "schemas"
    ride = json.loads((schemas / "ride_value.avsc").read_text())["fields"]
    kafka = ["kafka_topic", "kafka_partition", "kafka_offset", "kafka_timestamp", "schema_id"]
    assert [name for name, _, _ in found["raw_rides"]] == [f["name"] for f in ride] + kafka
    assert [doc for _, _, doc in found["raw_rides"]][: len(ride)] == [f.get("doc") for f in ride]
    pickup = json.loads((schemas / "pickup_location_value.avsc").read_text())["fields"]
    assert found["raw_pickup_locations"] == [f["name"] for f in pickup] + kafka
    assert found["high_amount_rides"] == [f["name"] for f in ride] + kafka
    assert found["topics"] == ["rides", "pickup_locations"]
