"""The walls between the three parts (pyproject's import-linter contracts) and Dagster's own checks of the layout,
run as a user runs them: `lint-imports` and `dg check defs` from the repository root."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]


def _run(*command: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(command, cwd=REPO_ROOT, capture_output=True, text=True, timeout=300, check=False)


def test_the_library_imports_no_dagster_and_the_code_location_no_dev_stack() -> None:
    done = _run(str(Path(sys.executable).parent / "lint-imports"))
    assert done.returncode == 0, done.stdout + done.stderr
    assert "Contracts: 2 kept, 0 broken." in done.stdout


def test_dg_checks_and_lists_the_defs_folder() -> None:
    dg = shutil.which("dg", path=str(Path(sys.executable).parent))
    assert dg, "dagster-dg-cli is in the dev extra"
    checked = _run(dg, "check", "defs")
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert "All definitions loaded successfully." in checked.stdout + checked.stderr
    listed = _run(dg, "list", "defs", "--json")
    assert listed.returncode == 0, listed.stderr
    listing = json.loads(listed.stdout)
    assert len(listing["assets"]) == 11
    assert {sensor["name"] for sensor in listing["sensors"]} == {
        "raw_rides_offset_sensor",
        "raw_pickup_locations_offset_sensor",
        "default_automation_condition_sensor",
        "continuous_streams_sensor",
    }
