"""The configuration that CI's `lint-imports` and `dg check defs` read (pyproject.toml). CI runs both tools
before the suite; these tests check that what they are told to check exists and covers every module, so that a
renamed or new module cannot leave a contract or the code location pointing at nothing, or stand outside every
wall; and that the README, the changelog and docs/ stay within their sizes and name no commit hash."""

from __future__ import annotations

import importlib
import importlib.util
import os
import re
import subprocess
import tomllib
from pathlib import Path

import dagster as dg

PYPROJECT = tomllib.loads((Path(__file__).resolve().parents[1] / "pyproject.toml").read_text())


CONTRACTS = PYPROJECT["tool"]["importlinter"]["contracts"]


def _parts() -> list[list[str]]:
    """The layers contract's three parts, top first: the modules of each."""
    (layers,) = [c for c in CONTRACTS if c["type"] == "layers"]
    return [[m.strip() for m in layer.split(":")] for layer in layers["layers"]]


def test_every_module_of_the_package_is_in_exactly_one_part_of_the_layers_contract() -> None:
    import pkgutil

    import streaming_pipeline

    parts = _parts()
    assert len(parts) == 3 and parts[0] == ["streaming_pipeline.devstack"]
    named = [m for part in parts for m in part]
    for module in named:
        assert importlib.util.find_spec(module) is not None, f"the layers contract names {module}, which does not exist"
    assert len(named) == len(set(named)), "a module is in two parts"
    modules = [info.name for info in pkgutil.walk_packages(streaming_pipeline.__path__, prefix="streaming_pipeline.")]
    outside = [m for m in modules if not any(m == n or m.startswith(n + ".") for n in named)]
    assert not outside, f"modules in no part of the layers contract (pyproject.toml): {outside}"


def test_the_forbidden_contracts_cover_the_library_and_the_code_location_as_the_layers_do() -> None:
    _stack, code_location, library = _parts()
    forbidden = {c["name"]: c for c in CONTRACTS if c["type"] == "forbidden"}
    sources = [sorted(c["source_modules"]) for c in forbidden.values()]
    assert sorted(library) in sources and sorted(code_location) in sources
    by_source = {tuple(sorted(c["source_modules"])): c["forbidden_modules"] for c in forbidden.values()}
    assert "dagster" in by_source[tuple(sorted(library))]
    assert {"fastapi", "uvicorn", "tqdm"} <= set(by_source[tuple(sorted(code_location))])
    assert {"streaming_pipeline.defs", "streaming_pipeline.definitions"} <= set(
        by_source[("streaming_pipeline.components",)]
    )


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
from streaming_pipeline.lakehouse import tables
print(json.dumps({
    "files": found,
    "raw_rides": [[c.name, c.type, c.description] for c in tables.RAW_RIDES.columns],
    "raw_pickup_locations": tables.RAW_PICKUP_LOCATIONS.column_names,
    "ride_columns": [c.name for c in tables.RIDE_COLUMNS],
    "topics": [tables.RIDES.topic, tables.PICKUP_LOCATIONS.topic],
    "loaded": sorted(m for m in sys.modules if m.split(".")[0] in ("dagster", "yaml")),
}))
"""


def test_the_library_imports_and_declares_its_tables_without_the_code_location(tmp_path: Path) -> None:
    """Every module of the library (the layers contract's last layer) imports from a copy of the package that has
    no `defs/` and no other part of the code location: the library reads none of its files."""
    import json
    import shutil
    import sys

    package = Path(__file__).resolve().parents[1] / "streaming_pipeline"
    copy = tmp_path / "streaming_pipeline"
    stack, code_location, library = _parts()
    # The code location's modules and the development stack, as the contracts name them: packages and modules alike.
    parts = [*code_location, *stack]
    left_out = {"__pycache__", *(f"{m.rsplit('.', 1)[-1]}{suffix}" for m in parts for suffix in ("", ".py"))}
    shutil.copytree(package, copy, ignore=lambda _, names: {n for n in names if n in left_out})
    assert not (copy / "defs").exists() and not (copy / "components").exists()
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
    assert found["ride_columns"] == [f["name"] for f in ride] + kafka
    assert found["topics"] == ["rides", "pickup_locations"]


# The sizes a reader can take in at once: the README a page, every other page of docs/ a sitting, the changelog (by
# release) and the testing page (how to run the suite, its current figures) less.
README_MAX_BYTES = 8_000
DOCS_PAGE_MAX_BYTES = 15_000
PAGE_MAX_BYTES = {"CHANGELOG.md": 12_000, "docs/testing.md": 4_000}
ROOT = Path(__file__).resolve().parents[1]


def test_the_readme_the_changelog_and_every_docs_page_stay_within_their_size() -> None:
    sizes = {path.relative_to(ROOT).as_posix(): path.stat().st_size for path in (ROOT / "docs").glob("*.md")}
    assert sizes, "docs/ has no page"
    sizes["README.md"] = (ROOT / "README.md").stat().st_size
    sizes["CHANGELOG.md"] = (ROOT / "CHANGELOG.md").stat().st_size
    limits = {page: DOCS_PAGE_MAX_BYTES for page in sizes} | {"README.md": README_MAX_BYTES} | PAGE_MAX_BYTES
    too_long = {page: size for page, size in sizes.items() if size > limits[page]}
    assert not too_long, "over their size: " + ", ".join(
        f"{page} {size:,} B (at most {limits[page]:,} B)" for page, size in sorted(too_long.items())
    )


# A word that may be a commit hash: 7 to 40 lowercase hex digits standing alone.
_HEX_WORD = re.compile(r"(?<![0-9A-Za-z_])[0-9a-f]{7,40}(?![0-9A-Za-z_])")


def _commits() -> list[str]:
    """Every commit of this repository's history (`git rev-list --all`); none outside a git checkout or without git."""
    import shutil

    if not (ROOT / ".git").exists() or shutil.which("git") is None:
        return []
    listed = subprocess.run(
        ["git", "rev-list", "--all"], cwd=ROOT, capture_output=True, text=True, timeout=60, check=False
    )
    assert listed.returncode == 0, f"git rev-list --all failed: {listed.stderr}"
    return listed.stdout.split()


def _commit_hashes_in(text: str, commits: list[str]) -> list[str]:
    """The words of `text` that are commit hashes: a prefix of a commit of this repository, or any hex word with both
    a digit and a letter (a hash of any repository; a number such as 1000000 or 20261123 has no letter)."""
    return [
        word
        for word in _HEX_WORD.findall(text)
        if (re.search(r"[0-9]", word) and re.search(r"[a-f]", word)) or any(c.startswith(word) for c in commits)
    ]


def test_the_readme_the_changelog_and_the_docs_name_no_commit_hash() -> None:
    """The pages are reference, true of the code now, and the changelog is by release: a figure names its date and
    release, a baseline what it was, never a commit, which is history."""
    commits = _commits()
    if commits:  # it finds this repository's own hashes, abbreviated or whole
        assert _commit_hashes_in(f"measured on {commits[-1][:7]}, see {commits[0]}.", commits) == [
            commits[-1][:7],
            commits[0],
        ]
    assert _commit_hashes_in("1a01901 `ff042ec`, 1000000 rides, seed 20261123, deadbeef", []) == [
        "1a01901",
        "ff042ec",
    ]
    pages = [ROOT / "README.md", ROOT / "CHANGELOG.md", *sorted((ROOT / "docs").glob("*.md"))]
    named = {
        f"{page.relative_to(ROOT).as_posix()}:{number}": hashes
        for page in pages
        for number, line in enumerate(page.read_text().splitlines(), start=1)
        if (hashes := _commit_hashes_in(line, commits))
    }
    assert not named, f"commit hashes in the docs (name the date and release instead): {named}"
