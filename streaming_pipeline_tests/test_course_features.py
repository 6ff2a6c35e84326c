"""The `sql` command as a user types it: JSON rows on stdout, and a bad query as one `error:` line.

The pure pieces (branching, enrichment, the lookup, the formats) are tested in
lakehouse/silver/test_transformations.py, devstack/test_zone_lookup.py and test_sql.py.
"""

from __future__ import annotations

import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from streaming_pipeline_tests.cli_helpers import environment_without

REPO_ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.integration
@pytest.mark.slow
def test_sql_command_prints_json_rows_and_fails_in_one_line(materialized_lakehouse, session_stack) -> None:
    """Over the session's materialized lakehouse: the rows on the session's engine (SPARK_REMOTE, as `stack env`
    exports it), counted here from the rides the lakehouse was given; the bad query with an in-process Spark (no
    SPARK_REMOTE), whose driver would log the parse error a second time if the command let it."""
    local = environment_without(("SPARK_",))
    local["LAKEHOUSE_DIR"] = str(materialized_lakehouse.lakehouse)
    env = {**local, "SPARK_REMOTE": str(session_stack.up(engine=True).spark_remote)}
    counts = Counter(int(v) for v in materialized_lakehouse.rides["vendor_id"])
    command = [sys.executable, "-m", "streaming_pipeline.devstack.cli", "sql"]
    ok = subprocess.run(
        [*command, "SELECT vendor_id, trip_count FROM gold.vendor_counts ORDER BY vendor_id", "--format", "json"],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert ok.returncode == 0, ok.stderr[-3000:]
    assert ok.stdout == "".join(
        f'{{"vendor_id": {vendor}, "trip_count": {count}}}\n' for vendor, count in sorted(counts.items())
    )
    assert "BetaWarning" not in ok.stderr, ok.stderr[-3000:]
    bad = subprocess.run(
        [*command, "SELEC 1"], cwd=REPO_ROOT, env=local, capture_output=True, text=True, timeout=300, check=False
    )
    assert bad.returncode == 1 and bad.stdout == ""
    errors = [line for line in bad.stderr.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1 and "PARSE_SYNTAX_ERROR" in errors[0], bad.stderr[-3000:]
    assert "Traceback" not in bad.stderr and "SQLQueryContextLogger" not in bad.stderr
