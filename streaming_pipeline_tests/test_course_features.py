"""The `sql` command as a user types it: JSON rows on stdout, and a bad query as one `error:` line.

The pure pieces (branching, enrichment, the lookup, the formats) are tested in silver/test_transformations.py,
silver/test_taxi_zones.py and test_sql.py.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def small_lakehouse(spark, tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("sql-lakehouse")
    counts = spark.createDataFrame([(1, 87), (2, 179)], "vendor_id INT, trip_count BIGINT")
    counts.write.format("delta").save(str(root / "vendor_counts"))
    return root


@pytest.mark.integration
def test_sql_command_prints_json_rows_and_fails_in_one_line(small_lakehouse: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SPARK_")}
    env["LAKEHOUSE_DIR"] = str(small_lakehouse)
    command = [sys.executable, "-m", "streaming_pipeline.devstack.cli", "sql"]
    ok = subprocess.run(
        [*command, "SELECT * FROM vendor_counts ORDER BY vendor_id", "--format", "json"],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert ok.returncode == 0, ok.stderr[-3000:]
    assert ok.stdout == '{"vendor_id": 1, "trip_count": 87}\n{"vendor_id": 2, "trip_count": 179}\n'
    assert "BetaWarning" not in ok.stderr, ok.stderr[-3000:]
    bad = subprocess.run(
        [*command, "SELEC 1"], cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=300, check=False
    )
    assert bad.returncode == 1 and bad.stdout == ""
    errors = [line for line in bad.stderr.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1 and "PARSE_SYNTAX_ERROR" in errors[0], bad.stderr[-3000:]
    assert "Traceback" not in bad.stderr and "SQLQueryContextLogger" not in bad.stderr
