"""The configuration that CI's `lint-imports` and `dg check defs` read (pyproject.toml). CI runs both tools
before the suite; these tests only check that what they are told to check exists, so that a renamed module
cannot leave a contract or the code location pointing at nothing."""

from __future__ import annotations

import importlib
import importlib.util
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
